"""The command line: ``sweep`` and its verbs (``sweep explain``'s own flags and terminal are
its room's: ``harness/explain/cli.py``). The console script's face is ``harness/entry.py``
(signal handlers first); argv becomes options in ``harness/options.py``.

- ``cli.py``          ``sweep``: subcommands, the run's terminal output, exit codes
"""
