"""The ``sweep`` console script: signal handlers first, then the command line.

``pyproject.toml`` points ``sweep`` here, not at ``harness.command.cli``: importing the CLI pulls
in httpx, jinja2 and the tokenizers (about half a second on a small machine), and a Ctrl-C or
SIGTERM in that second must already end with exit 130 and one line, not a traceback or a
death by signal (``harness.interrupts``): the handlers are set before the import and act
on a signal as soon as the import is done. ``python -m harness`` comes here too.
"""
from __future__ import annotations

import sys

from . import interrupts

__all__ = ["main"]


def _interrupted() -> int:
    """A signal outside the sweep's event loop: kill what may be running, say so."""
    interrupts.ignore()
    pool = sys.modules.get("harness.server_pool")  # nothing to kill if it never loaded
    if pool is not None:
        pool.kill_all_servers()
    print("sweep: interrupted", file=sys.stderr)
    return interrupts.EXIT_INTERRUPTED


def main() -> None:
    # While the CLI imports, a signal is only remembered: raised from the handler, it can
    # land inside importlib's own module-lock callback, where Python prints it as an
    # "Exception ignored ... KeyboardInterrupt" traceback instead of letting it through
    # (seen on a loaded 2-core box). Nothing runs during the imports, so acting on it right
    # after them loses nothing.
    interrupts.ignore()
    try:
        from .command.cli import main as cli_main
        if interrupts.pending():
            raise KeyboardInterrupt
        interrupts.install()
        if interrupts.pending():  # it came between the check and the install
            raise KeyboardInterrupt
        cli_main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        code = _interrupted()
    interrupts.finish(code)


if __name__ == "__main__":
    main()
