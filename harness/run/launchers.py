"""How a server process is started: ``--launcher plain`` (a new process, ``ServerProcess``)
or ``--launcher prefork`` (forked from one pre-imported parent, ``engine.prefork``).

A pre-imported parent imports the engine (vLLM, torch) once without touching CUDA and
forks a session-leader child per server, so a data point pays for CUDA init, weights and
graphs but not for the imports (about three quarters of a warm vLLM boot on the H200,
issue 17). ``PreforkLauncher`` starts that parent once per run, before the first point
(its imports take as long as one plain start-up); every server is then a
``PreforkServerProcess``: the same readiness check, teardown of the whole session and
bookkeeping as a plain ``ServerProcess``. Where a fork cannot be used (the parent did not
start, died, refused: CUDA initialised, an argv it cannot fork) the server starts as a
plain process and its record says why (``server_boot.fallback_reason``).

A parent refuses a child whose value of a variable its imports read differs from its own
(the child would keep the parent's reading): on the H200 torch/vLLM read
``CUDA_VISIBLE_DEVICES`` and the patch plugin ``RESIDUE_LAB_PATCHES`` at import. So the
first parent runs with the first slot's ``CUDA_VISIBLE_DEVICES`` and the first
configuration's env, and a server whose values of those variables differ gets a parent of
its own with its values, started the first time one is needed (off the event loop:
``PreforkServerProcess.prepare``) and reused, at most ``MAX_FORK_SERVERS`` of them.
``close`` stops every parent, which kills whatever it still has (its children also die
with it by PDEATHSIG); each carries the sweep's token (``harness.serve.orphans``), so the next
sweep ends one a killed sweep left: nothing is left behind.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.prefork import ForkServer, ForkServerUnavailable, start_child

from ..serve.engines import EngineAdapter, PreforkSpec
from ..serve.orphans import OWNER_ENV, owner_token
from ..server_pool import ServerProcess, Slot

__all__ = ["LAUNCHERS", "PreforkLauncher", "PreforkServerProcess", "make_launcher",
           "run_launcher"]

LAUNCHERS = ("plain", "prefork")
FORK_SERVER_START_TIMEOUT_S = 600.0
# Each parent holds a copy of the engine's imports (a vLLM one: a few GiB of host memory):
# a variable read at import that differs per server must not start one parent per server.
MAX_FORK_SERVERS = 8

EnvKey = tuple[tuple[str, "str | None"], ...]   # (name, value) of each variable read at import


class _ChildProc:
    """An ``engine.prefork`` child shaped like the ``Popen`` ``ServerProcess`` drives."""

    def __init__(self, child: Any) -> None:
        self.child = child
        self.pid = child.pid

    def poll(self) -> int | None:
        return self.child.poll()

    def wait(self, timeout: float | None = None) -> int:
        rc = self.child.wait(5.0 if timeout is None else timeout)
        if rc is None:
            raise subprocess.TimeoutExpired(f"server pid {self.pid}", timeout or 5.0)
        return rc


@dataclass(eq=False)
class PreforkServerProcess(ServerProcess):
    launcher: "PreforkLauncher | None" = field(default=None, repr=False)

    async def prepare(self) -> None:
        """``start_parent`` off the loop."""
        await asyncio.to_thread(self.start_parent)

    def start_parent(self) -> None:
        """Start the parent this server forks from if it is not running yet (blocking: its
        imports take as long as a plain start-up)."""
        assert self.launcher is not None
        self.launcher.server_for(self.launcher.spec.child_env(self.process_env()))

    def spawn_process(self, env: dict[str, str]):
        assert self.launcher is not None
        spec = self.launcher.spec
        child_argv, child_env = spec.child_argv(self.argv), spec.child_env(env)
        fs, reason = self.launcher.server_for(child_env)
        if reason is None and child_argv is None:
            reason = f"argv is not `python {spec.entry} ...`: cannot fork it"
        child = start_child(self.argv, env=env, log_path=self.log_path, server=fs,
                            entry=spec.entry, child_argv=child_argv,
                            fallback_reason=reason, child_env=child_env)
        self.how = child.how
        self.fallback_reason = child.fallback_reason
        self.env_differs = tuple(getattr(child, "env_differs", ()))
        self.started_epoch = child.started_at
        return _ChildProc(child)


class PreforkLauncher:
    """The pre-imported parents of a run, one per set of values of the variables the first
    one's imports read; a callable with ``ServerProcess``'s signature."""

    def __init__(self, spec: PreforkSpec, *, log_path: Path, env: dict[str, str],
                 cwd: str | None = None) -> None:
        self.spec = spec
        self.log_path = Path(log_path)
        self.env = env
        self.cwd = cwd
        self.fork_server: ForkServer | None = None   # the first one (started by ``start``)
        self.unavailable: str | None = None     # why every server starts plain
        self.import_s: float | None = None
        self.read_at_import: tuple[str, ...] = ()   # what the first one's imports read
        self.fork_servers: dict[EnvKey, ForkServer] = {}
        self.failed: dict[EnvKey, str] = {}      # a parent that did not start: why
        self.extra_import_s: dict[EnvKey, float] = {}
        self._starting: dict[EnvKey, threading.Event] = {}   # set when that start ends
        self._started = 0                        # parents started after the first
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> "PreforkLauncher":
        """Start the first parent and wait for its imports (blocking: call it off the loop)."""
        try:
            self.fork_server, self.import_s = self._start_one(self.env, self.log_path)
        except (ForkServerUnavailable, OSError) as e:
            self.fork_server, self.unavailable = None, str(e)
            return self
        self.read_at_import = tuple(self.fork_server.info.get("env_read_at_import", ()))
        self.fork_servers[self.key(self.fork_server.env)] = self.fork_server
        return self

    def _start_one(self, env: dict[str, str], log_path: Path) -> tuple[ForkServer, float]:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        fs = ForkServer(self.spec.preload, self.spec.optional, log_path=log_path, env=env,
                        cwd=self.cwd, start_timeout=FORK_SERVER_START_TIMEOUT_S).start()
        return fs, round(time.monotonic() - t0, 3)

    def key(self, env: dict[str, str]) -> EnvKey:
        """A child's values of the variables read at import: the parent it can fork from."""
        return tuple((k, env.get(k)) for k in self.read_at_import)

    def server_for(self, child_env: dict[str, str]) -> tuple[ForkServer | None, str | None]:
        """The parent whose import-time values are ``child_env``'s, started now if there is
        none yet (blocking; a second caller waits for the same start), or None and why the
        server starts plain."""
        if self.unavailable is not None or self.fork_server is None:
            return None, self.unavailable
        key = self.key(child_env)
        with self._lock:
            starting = self._starting.get(key)
            mine = starting is None and not self._known(key)
            if mine:
                if len(self.fork_servers) + len(self._starting) >= MAX_FORK_SERVERS:
                    return None, (f"{MAX_FORK_SERVERS} fork servers run (the most a run starts)"
                                  f" and none has this server's {self._differing(key)}")
                self._starting[key] = threading.Event()
                self._started += 1
                n = self._started      # its log's number: starts run side by side
        if mine:
            self._start_for(key, n)
        elif starting is not None:
            starting.wait()
        with self._lock:
            return self._found(key)

    def _known(self, key: EnvKey) -> bool:
        return key in self.fork_servers or key in self.failed or self._closed

    def _found(self, key: EnvKey) -> tuple[ForkServer | None, str | None]:
        if key in self.fork_servers:
            return self.fork_servers[key], None
        return None, self.failed.get(key, "the launcher is closed")

    def _start_for(self, key: EnvKey, n: int) -> None:
        """Start the parent for ``key``: the first one's env with ``key``'s values. Run
        outside the lock (imports take minutes); ``close`` meanwhile makes it stop again."""
        env = {k: v for k, v in self.env.items() if k not in self.read_at_import}
        env.update((k, v) for k, v in key if v is not None)
        log = self.log_path.with_name(f"{self.log_path.stem}-{n}{self.log_path.suffix}")
        fs, why = None, None
        try:
            fs, import_s = self._start_one(env, log)
        except (ForkServerUnavailable, OSError) as e:
            why = f"no fork server for this server's {self._differing(key)}: {e}"
        with self._lock:
            closed = self._closed
            if fs is not None and not closed:
                self.fork_servers[key], self.extra_import_s[key] = fs, import_s
            elif why is not None:
                self.failed[key] = why
            self._starting.pop(key).set()
        if fs is not None and closed:
            fs.close()

    def _differing(self, key: EnvKey) -> str:
        """``NAME=value`` of the variables in which ``key`` differs from the first parent's."""
        first = dict(self.key(self.fork_server.env)) if self.fork_server else {}
        return ", ".join(f"{k}={v}" for k, v in key if first.get(k) != v) or "values"

    def __call__(self, argv: list, env: dict, port: int, log_path: Path,
                 slot: Slot) -> PreforkServerProcess:
        return PreforkServerProcess(argv, env, port, log_path, slot, launcher=self)

    def describe(self) -> dict[str, Any]:
        info = self.fork_server.info if self.fork_server else {}
        return {"launcher": "prefork", "fork_server": self.fork_server is not None,
                "fork_server_import_s": self.import_s, "unavailable": self.unavailable,
                # left to each child: importing them initialised CUDA in the fork server's
                # probe (engine.prefork), e.g. vLLM's FLA ops on a GPU machine
                "not_preloaded_cuda": list(info.get("optional_skipped_cuda", ())),
                "optional_failed": sorted(info.get("optional_failed", {})),
                # the parents started for servers whose import-time variables differ
                "more_fork_servers": [{"for": self._differing(k), "import_s": s}
                                      for k, s in self.extra_import_s.items()],
                "fork_server_failures": sorted(self.failed.values())}

    def summary(self) -> str:
        """The one line a run prints about its launcher."""
        skipped = self.describe()["not_preloaded_cuda"]
        note = f"; left to each server (they initialise CUDA): {', '.join(skipped)}" if skipped else ""
        return "launcher prefork: " + (f"fork server up, imports took {self.import_s}s{note}"
                                       if self.fork_server else
                                       f"unavailable, servers start plain: {self.unavailable}")

    def close(self) -> None:
        """Stop every parent (each kills what it still has); none starts after, and one
        still importing is stopped as soon as its start returns (its thread does it; were
        the sweep gone first, PDEATHSIG ends it)."""
        with self._lock:
            self._closed = True
            servers, self.fork_servers, self.fork_server = list(self.fork_servers.values()), {}, None
        for fs in servers:
            fs.close()


def make_launcher(name: str, adapter: EngineAdapter, *, logs_dir: Path,
                  env: dict[str, str]) -> PreforkLauncher | None:
    """None for ``plain`` (``ServerProcess``); for ``prefork`` a launcher not yet started,
    or one that starts every server plain, saying why, when the engine cannot fork."""
    if name == "plain":
        return None
    spec = adapter.prefork()
    if spec is None:
        spec = PreforkSpec((), (), "", lambda argv: None)
        launcher = PreforkLauncher(spec, log_path=logs_dir / "fork-server.log", env=env)
        launcher.unavailable = f"engine {adapter.name} has no pre-imported launcher"
        return launcher
    return PreforkLauncher(spec, log_path=logs_dir / "fork-server.log", env=env)


def run_launcher(name: str, adapter: EngineAdapter, *, first_cfg: Any, slot: Slot,
                 logs_dir: Path) -> PreforkLauncher | None:
    """A run's launcher, started (this blocks: the parent's imports take as long as one
    plain start-up), with the env a server of ``first_cfg`` on ``slot`` gets (its
    ``CUDA_VISIBLE_DEVICES`` included: torch reads it at import, and a parent without it
    refused every server on the H200); None for ``plain``."""
    env: dict[str, str] = {}
    if name != "plain" and first_cfg is not None:
        _, env = adapter.command(first_cfg, 1, slot)   # env only
        if slot.gpu is not None:     # as harness.run.point gives it to each server
            env = {"CUDA_VISIBLE_DEVICES": slot.gpu, **env}
    # the sweep's token (harness.serve.orphans): the next sweep ends a fork server it outlived
    launcher = make_launcher(name, adapter, logs_dir=logs_dir,
                             env={**os.environ, **env, OWNER_ENV: owner_token()})
    if launcher is not None and launcher.unavailable is None:
        launcher.start()
    return launcher
