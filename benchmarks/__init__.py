"""Benchmark scripts (run by path) and the modules they share (``cost_table``, ``shapes``).

A regular package, so that ``import benchmarks.…`` finds these files first on ``sys.path``
wherever a site directory has a top-level ``benchmarks`` of its own (the CI venv has one).
"""
