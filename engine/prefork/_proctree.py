"""Process trees by session: every server runs as a session leader, so its whole tree
(API server, engine core, their helpers) is every live process with that session id.
A session survives re-parenting to init, which a parent/child walk does not."""
from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Callable

__all__ = ["alive", "kill_session", "session_pids"]


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, session id) of a process, ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # comm may hold spaces and parentheses: fields start after the last ')'.
    rest = data[data.rfind(")") + 2:].split()
    return rest[0], int(rest[3])


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie (exited, not yet reaped) counts as gone."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def session_pids(sid: int) -> list[int]:
    """Live processes of session ``sid``."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and st[1] == sid and st[0] not in ("Z", "X"):
                out.append(int(name))
    return sorted(out)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(sid: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = session_pids(sid)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)      # polling /proc: the condition itself, bounded by timeout
        left = session_pids(sid)
    return left


def kill_session(sid: int, *, grace: float = 10.0, sig: int = signal.SIGTERM) -> list[int]:
    """SIGTERM (or ``sig``) every process of session ``sid``, SIGKILL what is left after
    ``grace`` seconds; returns the pids still alive after that (normally none)."""
    left = session_pids(sid)
    if not left:
        return []
    _signal_all(left, sig)
    left = _wait_gone(sid, grace) if sig != signal.SIGKILL else _wait_gone(sid, 5.0)
    if left:
        _signal_all(left, signal.SIGKILL)
        left = _wait_gone(sid, 5.0)
    return left


PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks the kernel to SIGTERM the child when this process dies
    (``PR_SET_PDEATHSIG``, Linux; None where there is no ``prctl``). Resolved here, in the
    parent: the child only makes the call (no library loading between fork and exec). A
    child whose parent died between fork and the call kills itself."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
    return preexec
