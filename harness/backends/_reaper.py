"""Kill a Ray worker's (or a sweep's) servers when it dies, however it dies.

Every local sweep runs one too (``harness.orphans.GroupReaper``): a SIGKILLed sweep's
servers get ``PR_SET_PDEATHSIG`` only in the process it started, so a wrapper that does not
``exec`` would leave its server, a child in the same process group, running.

``ray.cancel(force=True)``, Ray's OOM killer and a lost raylet end a worker with SIGKILL:
no ``finally`` runs, and the servers it started (each in its own session, see
``server_pool``) would be orphaned, holding a GPU. So every Ray worker that runs data
points starts one of these watchdogs, in a session of its own, and keeps the write end
of a pipe to its stdin:

    +PGID   a server process group started by the worker
    -PGID   that group was stopped normally

When stdin reaches EOF the worker is gone (the kernel closes the pipe whatever killed
it): every group still registered gets SIGTERM, then SIGKILL after a grace period.
Standard library only, run by path: it must start even where ``harness`` is not
importable.
"""
from __future__ import annotations

import os
import signal
import sys
import time

GRACE_S = 5.0


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_groups(groups: set[int], grace: float = GRACE_S) -> None:
    for g in groups:
        _signal(g, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(g) for g in groups):
        time.sleep(0.05)
    for g in groups:
        if _alive(g):
            _signal(g, signal.SIGKILL)


def main() -> int:
    # Ctrl-C in a terminal running `ray start --block`, or a hang-up, must not take the
    # watchdog down before the worker.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    for line in sys.stdin:
        line = line.strip()
        if len(line) < 2 or line[0] not in "+-" or not line[1:].isdigit():
            continue
        pgid = int(line[1:])
        if line[0] == "+":
            groups.add(pgid)
        else:
            groups.discard(pgid)
    if groups:
        kill_groups(groups)
    return 0


if __name__ == "__main__":
    sys.exit(main())
