"""The command line: ``sweep`` and ``sweep explain``. The console script's face is
``harness/entry.py`` (signal handlers first); argv becomes options in ``harness/options.py``.

- ``cli.py``          ``sweep``: subcommands, the run's terminal output, exit codes
- ``explain_cli.py``  ``sweep explain``: its flags, the run, the ladder on the terminal
"""
