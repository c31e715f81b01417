"""The results file: append-only JSONL, what identifies a record, and the check that a
file is one. The record's shape itself is ``harness/run/records.py`` (``PhaseRecord``).

- ``store.py``         ``ResultStore``: one record per phase, flushed as it completes
- ``recordkeys.py``    a record's cell: configuration, case, residue, phase, document
- ``record_check.py``  is this file a results file? every line checked before it is read
"""
