"""The run layer: plan the data points, run one point, drive a sweep, type its records.

- ``record_builder``: ``RecordBuilder``, how a run writes its records;
- ``plan``: data points, the sweep plan, probe planning;
- ``golden``: ``--reference golden:RUN``'s answers, per data point;
- ``point``: ``PointRunner``, the per-point code every backend runs;
- ``phase_judge``: a measured phase judged: ``invalid``, ``not-lone``, its record's fields;
- ``driver``: ``Driver``, the only writer of a run's store, manifest and counters;
- ``auto``: ``--isolation auto``: which points each pass runs (reuse, then fresh confirmation);
- ``matrix_reference``: ``--reference first`` / ``consensus``, judged once every point ran;
- ``hits``: the tail a phase was meant to compute, and why the measured one differs;
- ``traffic``: what else the server ran around each phase (``/metrics`` before and after),
  and whether a match on a server the sweep does not own ran alone (``not-lone``);
- ``load``: ``--load N``: background conversations, and what ran beside a measured request;
- ``history``: ``--history``: the drivers (``DRIVERS``) that run what comes before the
  measured request, and their proofs; ``history_log``: the server's trace lines they read;
- ``prompt_logprobs``: ``--prompt-logprobs``: a phase's prompt logprobs against the cold one's;
- ``record_doc``: docs/records.md's field table, generated from ``PhaseRecord``;
- ``scheduling``: the order in which slots take data points;
- ``launchers``: how a server process is started (``--launcher plain`` / ``prefork``);
- ``live``: ``--url``: the running server a sweep attaches to, and its request budget;
- ``resume``: ``--resume RUN_ID``: the same run, from its manifest's options.

``run/*`` never imports ``harness.backends``: backends talk to the driver.
"""

__all__ = ["plan", "point", "driver"]
