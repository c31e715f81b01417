"""Kill a Ray worker's (or a sweep's) servers when it dies, however it dies.

Every local sweep runs one too (``harness.serve.orphans.GroupReaper``): a SIGKILLed sweep's
servers get ``PR_SET_PDEATHSIG`` only in the process it started, so a wrapper that does not
``exec`` would leave its server, a child in the same process group, running.

``ray.cancel(force=True)``, Ray's OOM killer and a lost raylet end a worker with SIGKILL:
no ``finally`` runs, and the servers it started (each in its own session, see
``server_pool``) would be orphaned, holding a GPU. So every Ray worker that runs data
points starts one of these watchdogs, in a session of its own, and keeps the write end
of a pipe to its stdin:

    +PGID   a server process group started by the worker
    -PGID   that group was stopped normally

    .       the owner ends normally: every server it started was stopped

When stdin reaches EOF the worker is gone (the kernel closes the pipe whatever killed
it): every group still registered gets SIGTERM, then SIGKILL after a grace period.

A group is registered just after its spawn returns, so an owner killed in that instant
(a loaded box can deschedule it between the spawn and the write) would leave a server
nobody registered. ``--environ NAME=VALUE`` closes that window: every server carries its
owner's token in its environment from its first instruction (``harness.serve.orphans``,
``RESIDUE_LAB_SWEEP``), inherited by whatever it starts, so at an EOF that did not follow
``.`` every process whose environment holds that entry is ended as well. After ``.`` it
is not: another run in the same process (the Python API) may still be using its servers.
A process inside its ``execve`` has no readable environment for an instant (``carrying``
waits for it); one between its fork and its exec still shows its spawner's environment,
without the token, for the few instructions before the exec: the next sweep's
``end_orphans`` finds it by the token once it runs.
Standard library only, run by path: it must start even where ``harness`` is not
importable.
"""
from __future__ import annotations

import os
import signal
import sys
import time

GRACE_S = 5.0
PF_KTHREAD = 0x00200000   # include/linux/sched.h: a kernel thread (no environment ever)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pgid: int, sig: int, send=os.killpg) -> None:
    """``send`` (a group's ``killpg``, or a process's ``kill``), where it is gone or not ours:
    nothing to do."""
    try:
        send(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie's parent reaps it; it holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _environ(pid: str, proc: str) -> list[bytes] | None:
    """A process's environment entries; None when it is gone or not ours to read."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            return [e for e in f.read().split(b"\0") if e]
    except OSError:
        return None


def _mid_exec(pid: str, proc: str) -> bool:
    """The process is in its ``execve`` between the point of no return and the kernel
    writing the new stack: its close-on-exec descriptors are already closed (so the
    ``Popen`` that started it has returned, and its spawner may have registered nothing
    yet), but its environment is not there: ``/proc/PID/environ`` reads empty until
    ``create_elf_tables`` sets the new image's ``env_end`` (``/proc/PID/stat`` field 51,
    0 until then). Zombies and kernel threads read empty too and are not waited for."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()   # fields[0] is field 3, state
        state, flags, env_end = fields[0], int(fields[6]), int(fields[48])
    except (OSError, IndexError, ValueError):
        return False
    return state not in (b"Z", b"X") and not flags & PF_KTHREAD and env_end == 0


def carrying(entry: str, settle: float = GRACE_S, proc: str = "/proc") -> set[int]:
    """Every process but this one whose environment holds ``entry`` (``NAME=VALUE``). A
    process caught inside its ``execve`` (``_mid_exec``) has no environment to read yet:
    it is read again until it has one (at most ``settle`` seconds). CI of 9b651b3 caught
    that instant: a token-carrying process started just before the owner's pipe closed
    was not listed, and lived on."""
    want = entry.encode()
    found: set[int] = set()
    pending: set[str] = set()
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        env = _environ(name, proc)
        if env == []:
            pending.add(name)
        elif env is not None and want in env:
            found.add(int(name))
    deadline = time.monotonic() + settle
    while pending:
        for name in list(pending):
            env = _after_exec(name, proc)
            if env != []:
                pending.discard(name)
                if env is not None and want in env:
                    found.add(int(name))
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.01)   # another process's exec has no event to wait on: poll its stat
    return found


def _after_exec(pid: str, proc: str) -> list[bytes] | None:
    """The environment of a process that read empty: ``[]`` while it is still inside its
    exec, its entries (or None) once it is out. The stat is read before the environment so
    an exec that ends between the two reads is seen with its new environment, not passed
    by as empty (CI of c8df02b caught that order the other way round)."""
    busy = _mid_exec(pid, proc)
    env = _environ(pid, proc)
    if busy and env == []:
        return []
    return env if env else None


def kill_groups(groups: set[int], grace: float = GRACE_S, pids: set[int] = frozenset()) -> None:
    """SIGTERM every group and process, SIGKILL what is still there after ``grace``."""
    for g in groups:
        _signal(g, signal.SIGTERM)
    for pid in pids:
        _signal(pid, signal.SIGTERM, os.kill)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (any(_alive(g) for g in groups)
                                           or any(_running(p) for p in pids)):
        time.sleep(0.05)
    for g in groups:
        if _alive(g):
            _signal(g, signal.SIGKILL)
    for pid in pids:
        if _running(pid):
            _signal(pid, signal.SIGKILL, os.kill)


def main(argv: list[str]) -> int:
    # Ctrl-C in a terminal running `ray start --block`, or a hang-up, must not take the
    # watchdog down before the worker.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    entry = argv[1] if len(argv) == 2 and argv[0] == "--environ" and "=" in argv[1] else None
    groups: set[int] = set()
    clean = False
    for line in sys.stdin:
        line = line.strip()
        if line == ".":
            clean = True
            continue
        if len(line) < 2 or line[0] not in "+-" or not line[1:].isdigit():
            continue
        pgid = int(line[1:])
        if line[0] == "+":
            groups.add(pgid)
        else:
            groups.discard(pgid)
    pids = carrying(entry) if entry and not clean else set()
    if groups or pids:
        kill_groups(groups, pids=pids)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
