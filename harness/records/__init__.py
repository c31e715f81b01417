"""The record model and the results file: ``PhaseRecord`` and ``RunManifest`` typed and
versioned, append-only JSONL read back as ``PhaseRecord``s, what identifies a record, and the
check that a file is one (no machinery: nothing here starts, asks or judges).

- ``phase_record.py``  ``PhaseRecord`` + ``SCHEMA_VERSION``: one phase record typed, read
  losslessly whatever its version; its server's boot typed (``ServerBoot``)
- ``store.py``         ``ResultStore``: one record per phase, flushed as it completes; the
  run manifest written and read; the typed readers (``load_records``,
  ``read_phase_records``, ``read_jsonl_records``)
- ``manifest.py``      ``RunManifest``: the run manifest typed and versioned
  (``MANIFEST_VERSION``), read losslessly whatever its version
- ``run_timing.py``    ``RunTiming``, ``RunPlan``: the manifest's ``timing`` and ``plan`` typed
- ``gate_block.py``    ``BaselineBlock`` / ``GateCell`` / ``StillBroken``: the manifest's
  ``baseline`` block typed
- ``manifest_blocks.py`` the manifest's other blocks typed: ``configs`` (``ConfigEntry``),
  ``backend`` (``RunBackend``), ``prompts`` (``PromptsBlock``, ``CaseFacts``), ``options``
  (``RunFlags``), ``explains`` and the other links (``ExplainsLink``, ``RunLink``)
- ``written.py``       ``Block``: the one round trip of those typed blocks (every key as read,
  in its order; a block built here in ``ORDER``)
- ``recordkeys.py``    a record's cell: configuration, case, residue, phase, document; the
  latest of each cell, the reference cells, the verdicts per node
- ``record_check.py``  is this file a results file? every line checked before it is read
- ``same_compile.py``  whose broken bytes may be compared: records of one compile
  fingerprint (issue 48), for compare, the gate and the report
"""
