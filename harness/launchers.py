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
plain process and its record says why (``server_boot.fallback_reason``). ``close`` stops
the parent, which kills whatever it still has (its children also die with it by
PDEATHSIG): nothing is left behind.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.prefork import ForkServer, ForkServerUnavailable, start_child

from .engines import EngineAdapter, PreforkSpec
from .orphans import OWNER_ENV, owner_token
from .server_pool import ServerProcess, Slot

__all__ = ["LAUNCHERS", "PreforkLauncher", "PreforkServerProcess", "make_launcher",
           "run_launcher"]

LAUNCHERS = ("plain", "prefork")
FORK_SERVER_START_TIMEOUT_S = 600.0


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

    def spawn_process(self, env: dict[str, str]):
        assert self.launcher is not None
        spec, fs = self.launcher.spec, self.launcher.fork_server
        child_argv = spec.child_argv(self.argv)
        reason = self.launcher.unavailable
        if reason is None and child_argv is None:
            reason = f"argv is not `python {spec.entry} ...`: cannot fork it"
        child = start_child(self.argv, env=env, log_path=self.log_path, server=fs,
                            entry=spec.entry, child_argv=child_argv,
                            fallback_reason=reason, child_env=spec.child_env(env))
        self.how = child.how
        self.fallback_reason = child.fallback_reason
        self.env_differs = tuple(getattr(child, "env_differs", ()))
        self.started_epoch = child.started_at
        return _ChildProc(child)


class PreforkLauncher:
    """One pre-imported parent for a run; a callable with ``ServerProcess``'s signature."""

    def __init__(self, spec: PreforkSpec, *, log_path: Path, env: dict[str, str],
                 cwd: str | None = None) -> None:
        self.spec = spec
        self.log_path = Path(log_path)
        self.env = env
        self.cwd = cwd
        self.fork_server: ForkServer | None = None
        self.unavailable: str | None = None     # why every server starts plain
        self.import_s: float | None = None

    def start(self) -> "PreforkLauncher":
        """Start the parent and wait for its imports (blocking: call it off the loop)."""
        import time
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        try:
            self.fork_server = ForkServer(self.spec.preload, self.spec.optional,
                                          log_path=self.log_path, env=self.env, cwd=self.cwd,
                                          start_timeout=FORK_SERVER_START_TIMEOUT_S).start()
            self.import_s = round(time.monotonic() - t0, 3)
        except (ForkServerUnavailable, OSError) as e:
            self.fork_server, self.unavailable = None, str(e)
        return self

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
                "optional_failed": sorted(info.get("optional_failed", {}))}

    def summary(self) -> str:
        """The one line a run prints about its launcher."""
        skipped = self.describe()["not_preloaded_cuda"]
        note = f"; left to each server (they initialise CUDA): {', '.join(skipped)}" if skipped else ""
        return "launcher prefork: " + (f"fork server up, imports took {self.import_s}s{note}"
                                       if self.fork_server else
                                       f"unavailable, servers start plain: {self.unavailable}")

    def close(self) -> None:
        fs, self.fork_server = self.fork_server, None
        if fs is not None:
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
    plain start-up), with the servers' env as the adapter gives it for ``first_cfg``
    (``CUDA_VISIBLE_DEVICES`` is each server's own); None for ``plain``."""
    env: dict[str, str] = {}
    if name != "plain" and first_cfg is not None:
        _, env = adapter.command(first_cfg, 1, slot)   # env only
        env = {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"}
    # the sweep's token (harness.orphans): the next sweep ends a fork server it outlived
    launcher = make_launcher(name, adapter, logs_dir=logs_dir,
                             env={**os.environ, **env, OWNER_ENV: owner_token()})
    if launcher is not None and launcher.unavailable is None:
        launcher.start()
    return launcher
