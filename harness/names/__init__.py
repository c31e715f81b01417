"""The names the records, reports and flags share, apart from the machinery that acts on them.

One leaf module per kind of name (history, isolation, engine, verdict, phase): each holds the
table of its values and what each means, and imports nothing of the harness but other modules
of this package (tests/harness/test_layout.py checks it). The code that *does* a history, an
isolation or an engine lives in run/, serve/ and backends/ and reads its row here.

- ``verdict.py``    ``VERDICT_TABLE``: what each verdict means, its groups, ``VerdictName``
- ``phase.py``      ``PHASES`` in run order, ``PhaseName``
- ``isolation.py``  ``POLICIES``: what each ``--isolation`` value is, ``IsolationName``
- ``engine.py``     ``ENGINES``: the engines by name, ``EngineName``
- ``reference.py``  the ``--reference`` words: per answer, matrix (``MATRIX_REFERENCES``), golden
- ``history.py``    ``HISTORIES`` (the ``--history`` names, what each runs, proves, targets and
  cannot see, what the rule predicts) and ``HistoryProof``, a history's proof in a record.
"""
