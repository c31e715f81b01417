"""The results file: append-only JSONL, what identifies a record, and the check that a
file is one. The record's shape itself is ``harness/run/records.py`` (``PhaseRecord``).

- ``store.py``         ``ResultStore``: one record per phase, flushed as it completes; the
  run manifest written and read
- ``manifest.py``      ``RunManifest``: the run manifest typed and versioned
  (``MANIFEST_VERSION``), read losslessly whatever its version
- ``recordkeys.py``    a record's cell: configuration, case, residue, phase, document
- ``record_check.py``  is this file a results file? every line checked before it is read
- ``same_compile.py``  whose broken bytes may be compared: records of one compile
  fingerprint (issue 48), for compare, the gate and the report
"""
