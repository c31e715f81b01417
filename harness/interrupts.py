"""SIGINT, SIGTERM and SIGHUP from the first instruction of ``sweep`` to its last: exit 130.

SIGHUP is the terminal closing (an ssh session dropped): it takes the same interrupt path
(records flushed, servers ended, the pid file removed) instead of the default death by
signal that left ``<run>.servers.json`` and the servers behind (issue 33 item 12).

Standard library only (and ``harness.errors``, itself so), imported by ``harness.entry`` before anything heavy, so a Ctrl-C
during the imports (httpx, jinja2, the tokenizers: half a second on a small machine) is not a
``KeyboardInterrupt`` traceback, and a SIGTERM is not a silent death by signal.

Three stages, one handler each:

- ``install()``: outside the event loop, a signal raises ``KeyboardInterrupt`` (SIGTERM
  too) and is remembered, so a library that swallows the exception cannot make it lost:
  ``pending()`` says a signal came, and the sweep checks it before it starts anything.
- inside the sweep's event loop, ``LoopSignals`` adds loop handlers that cancel the sweep
  (graceful: the driver writes the manifest as interrupted, servers are killed) and puts
  these handlers back afterwards with ``install()`` (asyncio would restore SIG_DFL for
  SIGTERM, i.e. death by signal).
- ``finish(code)``: at the very end, a signal only marks the exit as interrupted; an
  ``atexit`` hook registered first (so it runs last) turns that into exit 130.
"""
from __future__ import annotations

import atexit
import os
import signal
import sys

from .errors import ExitCode

__all__ = ["EXIT_INTERRUPTED", "SIGNALS", "install", "pending", "ignore", "finish", "LoopSignals"]

EXIT_INTERRUPTED = ExitCode.INTERRUPTED
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_state = {"signal": None, "final": False}


def _raise(signum, frame) -> None:
    _state["signal"] = signum
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _mark(signum, frame) -> None:
    _state["signal"] = signum


def _last_word() -> None:
    """Runs after every other atexit hook: a signal that came at the end still says 130."""
    if _state["final"] and _state["signal"] is not None:
        os._exit(EXIT_INTERRUPTED)


def install() -> None:
    """Signals raise ``KeyboardInterrupt`` from here on (and are remembered)."""
    for sig in SIGNALS:
        signal.signal(sig, _raise)


def pending() -> bool:
    """A signal arrived (even one whose exception some library swallowed)."""
    return _state["signal"] is not None


def ignore() -> None:
    """While cleaning up after an interrupt: further signals are remembered, not raised."""
    for sig in SIGNALS:
        signal.signal(sig, _mark)


def finish(code: int) -> None:
    """Exit with ``code``, or 130 when a signal came (now or earlier)."""
    _state["final"] = True
    ignore()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: nothing more can be said, and the
        try:                       # flush at shutdown must not fail on it either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
    sys.exit(EXIT_INTERRUPTED if pending() else code)


atexit.register(_last_word)


class LoopSignals:
    """SIGINT / SIGTERM inside the sweep's event loop cancel the sweep (gracefully: servers
    killed, the manifest says interrupted); the handlers the process had before are put
    back afterwards. Installed before the probes boot, so an interrupt during the first
    boot is graceful too. Off the main thread (where a loop cannot take signals) it does
    nothing."""

    def __init__(self, enabled: bool) -> None:
        import asyncio      # here, not at the top: this module loads before anything heavy
        import threading
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.interrupted = False
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._before: dict[int, object] = {}

    def _interrupt(self) -> None:
        self.interrupted = True
        if self._task is not None:
            self._task.cancel()

    def __enter__(self) -> "LoopSignals":
        if self.enabled:
            for sig in SIGNALS:
                self._before[sig] = signal.getsignal(sig)
                self._loop.add_signal_handler(sig, self._interrupt)
        if pending():  # came before the loop took over: act on it now
            self._interrupt()
        return self

    def __exit__(self, *exc) -> None:
        for sig, before in self._before.items():
            self._loop.remove_signal_handler(sig)
            # asyncio leaves SIG_DFL for SIGTERM (death by signal): the caller's handler back
            if before is not None:
                signal.signal(sig, before)
