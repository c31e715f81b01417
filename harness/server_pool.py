"""How a server lives and dies: slots, ports, spawn, readiness, logs, teardown.

Scheduling (which data point runs next) lives in ``residue_sweep``; this module only
knows processes. A server is started in its own session / process group with its output
captured to a log file next to the results, is ready when ``/health`` answers 200 while
its process is still alive and holds the port's listening socket (another program may take
a free port first; a server that exits during boot is a boot failure at once,
with the log lines that say why), and is stopped by SIGTERM → wait → SIGKILL of its whole
process tree, after which nothing of it may survive.

The servers of one run form a ``ServerGroup``: the run (a ``residue_sweep.Sweep``, a Ray
worker's point) owns it, hands its ``launcher`` down to whatever starts servers (the
planning probes, the point runner) and tells it who observes them (the run's pid file,
a Ray worker's watchdog). There is no module-level list of hooks: two runs in one process
never hear of, list or stop each other's servers. What this module keeps for the whole
process is only the last resort of a signal or an internal error: every live server,
killed by ``kill_all_servers``.
"""
from __future__ import annotations

import asyncio
import errno
import os
import re
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import psutil

from .serve.client import EngineClient
from .serve.orphans import OWNER_ENV, GroupReaper, PidFile, die_with_parent, owner_token
from .serve.slots import Slot  # noqa: F401  (re-exported: where a server runs)
from .errors import HandledError

__all__ = ["attempts_said", "Observer", "ServerGroup", "READY_POLL_S", "READY_POLL_FAST_FOR_S", "READY_POLL_MAX_S",
           "TERM_GRACE_S", "BootFailure", "Slot", "PortAllocator", "holds_listener", "live_servers", "kill_all_servers",
           "log_excerpt", "ServerProcess", "server_pids"]

# /health is polled every 10 ms for the first second (a lab server is up in ~0.3 s and
# every poll interval of lag is boot time charged to the point), then backs off to 0.5 s
# (a vLLM server takes minutes).
READY_POLL_S = 0.01
READY_POLL_FAST_FOR_S = 1.0
READY_POLL_MAX_S = 0.5
TERM_GRACE_S = 5.0
# Log lines that explain a failure: Python errors, vLLM's capacity message, asserts.
_EXPLAIN = re.compile(r"(Error|Exception|Traceback|assert|Assertion|KV cache is needed|"
                      r"out of memory|OOM|CUDA|address already in use|Killed|FATAL|died)",
                      re.IGNORECASE)


class BootFailure(HandledError, RuntimeError):
    """A server that did not come up. ``retryable``: it exited during boot (an OOM beside
    other booting servers can pass); a boot that timed out or could not be spawned is not
    tried again. ``attempts``: the boots tried for this point (run/point.py)."""

    def __init__(self, reason: str, log_excerpt: list[str], *, port_conflict: bool = False,
                 retryable: bool = True, attempts: int = 1):
        super().__init__(reason)
        self.reason = reason
        self.log_excerpt = log_excerpt
        self.port_conflict = port_conflict
        self.retryable = retryable
        self.attempts = attempts


class PortAllocator:
    """Free loopback ports without races between our own slots: the kernel picks a free
    port, and ports handed out and not yet released are never handed out again. A clash
    with another program is caught at boot (``address already in use``) and retried."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: set[int] = set()

    def acquire(self) -> int:
        with self._lock:
            for _ in range(64):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                if port not in self._taken:
                    self._taken.add(port)
                    return port
        raise RuntimeError("no free port")

    def release(self, port: int) -> None:
        with self._lock:
            self._taken.discard(port)


# Every server this process started and has not finished stopping, whatever run it is
# of: the last resort of a signal handler or an internal error (``kill_all_servers``).
_LIVE: set["ServerProcess"] = set()
_LIVE_LOCK = threading.Lock()

# Called with (event, server): "started" right after the spawn, "stopped" after a
# completed teardown or a kill.
Observer = Callable[[str, "ServerProcess"], None]


class ServerGroup:
    """The servers of one run: who observes each start and stop, and which still run.

    A server joins the group it was started through (``launcher``); its starts and stops
    go to this group's observers only, and ``kill_all`` stops this group's servers only."""

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self._observers: list[Observer] = list(observers)
        self._live: set["ServerProcess"] = set()
        self._lock = threading.Lock()

    def observe(self, observer: Observer) -> None:
        with self._lock:
            self._observers.append(observer)

    def unobserve(self, observer: Observer) -> None:
        with self._lock:
            self._observers.remove(observer)

    def launcher(self, make: Callable[..., "ServerProcess"] | None = None
                 ) -> Callable[..., "ServerProcess"]:
        """``make`` (``ServerProcess`` by default, or a run's ``PreforkLauncher``) with each
        server it makes joining this group; the same ``(argv, env, port, log_path, slot)``
        signature."""
        make = make or ServerProcess

        def launch(argv: list, env: dict, port: int, log_path: Path, slot: Slot):
            server = make(argv, env, port, log_path, slot)
            if isinstance(server, ServerProcess):   # a test's fake server tells no one
                server.group = self
            return server
        return launch

    def notify(self, event: str, server: "ServerProcess") -> None:
        with self._lock:
            if event == "started":
                self._live.add(server)
            else:
                self._live.discard(server)
            observers = list(self._observers)
        for observer in observers:
            observer(event, server)

    def live(self) -> list["ServerProcess"]:
        with self._lock:
            return list(self._live)

    def kill_all(self) -> int:
        """Kill every live server of this group at once (the run ends or is cancelled)."""
        servers = self.live()
        for srv in servers:
            srv.kill_tree_now()
        return len(servers)


def live_servers() -> list["ServerProcess"]:
    with _LIVE_LOCK:
        return list(_LIVE)


def kill_all_servers() -> int:
    """Synchronous last resort (signal handlers, atexit, an internal error): kill every
    live server tree of this process, whatever run started it."""
    n = 0
    for srv in live_servers():
        srv.kill_tree_now()
        n += 1
    return n


@contextmanager
def server_pids(out_dir: Path, run_id: str, servers: ServerGroup) -> Iterator[PidFile]:
    """The run's pid file and its reaper (``harness.serve.orphans``), observing the run's
    ``servers`` while the run lives; the file is removed at the end when none of them is
    left running, and the reaper ends any group that still is."""
    pids = PidFile(out_dir, run_id)
    reaper = GroupReaper()   # ends the run's server groups if the sweep is killed
    servers.observe(pids.hook)
    servers.observe(reaper.hook)
    try:
        yield pids
    finally:
        servers.unobserve(pids.hook)
        servers.unobserve(reaper.hook)
        if not servers.live():
            pids.remove()
        reaper.close()


def log_excerpt(path: Path, *, tail: int = 12, explain: int = 12) -> list[str]:
    """The lines that explain a failure: matching error lines, then the last lines."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    hits = [ln for ln in lines if _EXPLAIN.search(ln)][-explain:]
    last = lines[-tail:]
    out: list[str] = []
    for ln in hits + last:
        if ln not in out:
            out.append(ln[:500])
    return out


@dataclass(eq=False)
class ServerProcess:
    argv: list[str]
    env: dict[str, str]
    port: int
    log_path: Path
    slot: Slot
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    boot_s: float | None = None
    started_epoch: float | None = None   # time.time() at spawn: a boot split's origin
    ready_epoch: float | None = None     # time.time() at the first /health 200
    how: str = "plain"                   # how it was started (harness/run/launchers.py)
    fallback_reason: str | None = None   # why a pre-imported launcher was not used
    # forked: variables a library may read at import whose value differs from the parent's
    env_differs: tuple[str, ...] = ()
    # psutil.Process objects, not pids: psutil refuses to signal a reused pid.
    _procs: dict[int, psutil.Process] = field(default_factory=dict)
    # the run it belongs to (ServerGroup.launcher): told of its start and stop
    group: ServerGroup | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def prepare(self) -> None:
        """What must be ready before ``start`` (which does not block the loop): nothing
        for a plain process; a forked one's parent (``launchers.PreforkServerProcess``)."""

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = self.process_env()
        self.started_at = time.monotonic()
        self.started_epoch = time.time()
        self.proc = self.spawn_process(env)
        self._procs[self.proc.pid] = psutil.Process(self.proc.pid)
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._notify("started")

    def process_env(self) -> dict[str, str]:
        """The whole environment the server process gets: this one's, the server's own,
        and the sweep's token (harness.serve.orphans)."""
        return {**os.environ, **self.env, OWNER_ENV: owner_token()}

    def _notify(self, event: str) -> None:
        if self.group is not None:
            self.group.notify(event, self)

    def spawn_process(self, env: dict[str, str]):
        """Start the server in its own session, SIGTERMed by the kernel if the sweep dies
        (``harness.serve.orphans``); returns what ``proc`` is (a Popen, or
        anything with ``pid``, ``poll()`` and ``wait(timeout)``: harness/run/launchers.py)."""
        with open(self.log_path, "ab") as log:
            try:
                return subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env,
                                        start_new_session=True,
                                        preexec_fn=die_with_parent())
            except OSError as e:
                raise BootFailure(f"cannot start {self.argv[0]!r}: {e}", [],
                                  retryable=False) from e

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def tree_alive(self) -> bool:
        """The server process itself is running (a zombie counts as dead)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            return psutil.Process(self.proc.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def _remember_children(self) -> None:
        if self.proc is None:
            return
        try:
            for c in psutil.Process(self.proc.pid).children(recursive=True):
                self._procs.setdefault(c.pid, c)
        except psutil.NoSuchProcess:
            pass

    async def wait_ready(self, client: EngineClient, timeout: float) -> float:
        """Poll /health while watching the process; returns boot seconds."""
        assert self.proc is not None
        deadline = self.started_at + timeout
        delay = READY_POLL_S
        while True:
            code = self.proc.poll()
            if code is not None:
                excerpt = log_excerpt(self.log_path)
                conflict = any("address already in use" in ln.lower() for ln in excerpt)
                raise BootFailure(f"server exited with code {code} during boot: "
                                  f"{_last_meaningful(excerpt)}", excerpt, port_conflict=conflict)
            # A bare connect() tells whether anything listens yet at the cost of a syscall;
            # the HTTP /health request (which must answer 200) only once something does.
            if _listening(self.port) and await client.health(
                    timeout=min(2.0, max(0.1, deadline - time.monotonic()))) \
                    and holds_listener(self.proc.pid, self.port):
                self.boot_s = time.monotonic() - self.started_at
                self.ready_epoch = time.time()
                self._remember_children()
                return self.boot_s
            if time.monotonic() >= deadline:
                excerpt = log_excerpt(self.log_path)
                last = next((ln.strip() for ln in reversed(excerpt) if ln.strip()), "no output")
                # alive and not ready: the last line says how far it got (a cold compile?),
                # an error-looking line earlier in the log is not why (a ulimit warning)
                raise BootFailure(f"not healthy after {timeout:g}s, still running; last log "
                                  f"line: {last[:200]}", excerpt, retryable=False)
            await asyncio.sleep(delay)
            if time.monotonic() - self.started_at > READY_POLL_FAST_FOR_S:
                delay = min(delay * 1.5, READY_POLL_MAX_S)

    async def stop(self, grace: float = TERM_GRACE_S) -> float:
        """SIGTERM the process group, wait, SIGKILL what is left; verify nothing survives."""
        t0 = time.monotonic()
        await asyncio.to_thread(self._stop_sync, grace)
        return time.monotonic() - t0

    def _stop_sync(self, grace: float) -> None:
        if self.proc is None:
            return
        self._remember_children()
        procs = _existing(self._procs)
        _signal_group(self.proc.pid, signal.SIGTERM)
        for p in procs:
            _send(p, signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace)
        if alive:
            _signal_group(self.proc.pid, signal.SIGKILL)
            for p in alive:
                _send(p, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=5)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        survivors = [p for p in _existing(self._procs) if _status(p) != psutil.STATUS_ZOMBIE]
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self._notify("stopped")
        if survivors:
            raise RuntimeError(f"server processes survived teardown: {[p.pid for p in survivors]}")

    def kill_tree_now(self) -> None:
        if self.proc is None:
            return
        self._remember_children()
        _signal_group(self.proc.pid, signal.SIGKILL)
        for p in _existing(self._procs):
            _send(p, signal.SIGKILL)
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self._notify("stopped")


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setblocking(False)
        return s.connect_ex(("127.0.0.1", port)) in (0, errno.EINPROGRESS)


def holds_listener(pid: int, port: int) -> bool:
    """Whether ``port``'s listening socket is held by ``pid`` or one of its children: a
    port handed out free can be taken by another program's server before ours binds it,
    and that server answers /health too (ours then exits: ``address already in use``).
    True where the sockets cannot be read (another OS's rules): as before, /health alone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return True
    readable = False
    for proc in procs:
        try:
            conns = proc.net_connections("tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        readable = True
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
               for c in conns):
            return True
    return not readable


def _last_meaningful(lines: list[str]) -> str:
    for ln in reversed(lines):
        if _EXPLAIN.search(ln):
            return ln.strip()[:300]
    return (lines[-1].strip()[:300] if lines else "no output")


def _existing(procs: dict[int, psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs.values() if p.is_running()]


def _status(p: psutil.Process) -> str:
    try:
        return p.status()
    except psutil.NoSuchProcess:
        return psutil.STATUS_ZOMBIE


def _send(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def attempts_said(reason: str, failed: list[str]) -> str:
    """A boot-fail's reason with how many boots were tried (the first one's reason too,
    when it differs from the last)."""
    if len(failed) < 2:
        return reason
    first = "" if failed[0] == reason else f"; attempt 1: {failed[0][:200]}"
    return f"{reason} (failed {len(failed)} of {len(failed)} boot attempts{first})"
