"""The client side: start a fork server, ask it for children, and fall back to a plain
process where it cannot be used. Both kinds of child have one interface."""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ._proctree import alive, die_with_parent, kill_session, session_pids

__all__ = ["ForkServer", "ForkServerUnavailable", "ForkedChild", "PlainChild", "start_child"]


class ForkServerUnavailable(RuntimeError):
    """The fork server cannot serve (import failure, CUDA initialised, not Linux, dead)."""


class _Lines:
    """Line reader over a pipe with a deadline (select, no thread)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, b""

    def readline(self, timeout: float) -> bytes | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                data = os.read(self.fd, 65536)
                if not data:
                    return b""
                self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line


class ForkServer:
    """A pre-imported parent. ``preload`` must import; ``optional`` may fail (the child
    imports what is missing itself). ``env`` is the environment the imports run under:
    give it what the children will have, since some libraries read variables at import.

    >>> with ForkServer(["engine.lab.cli"], log_path="fs.log") as fs:      # doctest: +SKIP
    ...     child = fs.spawn("-m engine.lab", ["--port", "8001"], log_path="srv.log")
    """

    def __init__(self, preload: Sequence[str], optional: Sequence[str] = (), *,
                 log_path: str | os.PathLike[str], python: str | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                 start_timeout: float = 300.0, reply_timeout: float = 30.0) -> None:
        self.preload, self.optional = list(preload), list(optional)
        self.log_path = Path(log_path)
        self.python = python or sys.executable
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.start_timeout, self.reply_timeout = start_timeout, reply_timeout
        self.proc: subprocess.Popen | None = None
        self.info: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._next_id = 0

    def argv(self) -> list[str]:
        return [self.python, "-m", "engine.prefork", "--preload", ",".join(self.preload),
                "--optional", ",".join(self.optional)]

    def start(self) -> "ForkServer":
        """Start and wait until the imports are done; raises :class:`ForkServerUnavailable`
        with the server's reason (the server is then gone)."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, env=self.env,
                                         cwd=self.cwd, start_new_session=True,
                                         preexec_fn=die_with_parent())
        self._lines = _Lines(self.proc.stdout.fileno())
        line = self._lines.readline(self.start_timeout)
        msg = _decode(line)
        if not msg or msg.get("event") != "ready":
            reason = (msg or {}).get("reason") or (
                "timed out importing" if line is None else "exited during start-up")
            self.close()
            raise ForkServerUnavailable(f"fork server unusable: {reason} (log {self.log_path})")
        self.info = msg
        return self

    def _call(self, req: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            raise ForkServerUnavailable("fork server is not running")
        with self._lock:
            self._next_id += 1
            req = {**req, "id": self._next_id}
            try:
                self.proc.stdin.write((json.dumps(req) + "\n").encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise ForkServerUnavailable(f"fork server gone: {exc}") from None
            msg = _decode(self._lines.readline(timeout or self.reply_timeout))
        if not msg:
            raise ForkServerUnavailable("fork server did not answer")
        if not msg.get("ok"):
            raise ForkServerUnavailable(msg.get("error", "refused"))
        return msg

    def spawn(self, entry: str, argv: Sequence[str], *, log_path: str | os.PathLike[str],
              env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None) -> "ForkedChild":
        """Fork one child running ``entry`` (``-m module`` or ``module:function``) with
        ``argv``; its stdout and stderr go to ``log_path``; ``env`` is its whole
        environment (default: this server's)."""
        req = {"op": "spawn", "entry": entry, "argv": [str(a) for a in argv],
               "env": dict(self.env if env is None else env), "log": str(log_path),
               "cwd": str(cwd) if cwd else None}
        msg = self._call(req)
        return ForkedChild(pid=int(msg["pid"]), log_path=Path(log_path), server=self,
                           started_at=float(msg["forked_at"]),
                           env_differs=tuple(msg.get("env_differs", ())))

    def poll(self, pid: int) -> int | None:
        msg = self._call({"op": "poll", "pid": pid})
        return msg.get("returncode")

    def close(self, grace: float = 15.0) -> None:
        """Closing stdin makes the server kill its children and exit."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            kill_session(proc.pid, grace=1.0)
            proc.wait(timeout=5)
        if proc.stdout:
            proc.stdout.close()

    def __enter__(self) -> "ForkServer":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decode(line: bytes | None) -> dict[str, Any] | None:
    if not line:
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


@dataclass
class _Child:
    pid: int
    log_path: Path
    started_at: float            # epoch seconds: the BootSplit's process start
    how: str = "plain"
    fallback_reason: str | None = None
    env_differs: tuple[str, ...] = ()

    def tree(self) -> list[int]:
        """Live processes of this child's session (it and everything it started)."""
        return session_pids(self.pid)

    def kill(self, grace: float = 10.0) -> list[int]:
        """SIGTERM the whole tree, SIGKILL after ``grace``; returns survivors (none)."""
        left = kill_session(self.pid, grace=grace)
        self._reap()
        return left

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc = self.poll()
            if rc is not None:
                return rc
            time.sleep(0.05)       # bounded poll of the exit condition itself
        return self.poll()

    def poll(self) -> int | None:
        raise NotImplementedError

    def _reap(self) -> None:
        self.poll()


@dataclass
class ForkedChild(_Child):
    server: ForkServer | None = field(default=None, repr=False)
    how: str = "forked"

    def poll(self) -> int | None:
        if self.server is not None and self.server.proc is not None:
            try:
                return self.server.poll(self.pid)
            except ForkServerUnavailable:
                pass
        # The server is gone: its children died with it (PDEATHSIG) or were reparented.
        return None if alive(self.pid) else -9


@dataclass
class PlainChild(_Child):
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None


def start_child(plain_argv: Sequence[str], *, env: Mapping[str, str],
                log_path: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None,
                server: ForkServer | None = None, entry: str | None = None,
                child_argv: Sequence[str] | None = None,
                fallback_reason: str | None = None,
                child_env: Mapping[str, str] | None = None) -> _Child:
    """A server process: forked from ``server`` when given with ``entry`` and
    ``child_argv``, else (or when the server refuses) ``plain_argv`` in its own session.
    ``.how`` says which; ``.fallback_reason`` why a fork was not used. ``child_env``: the
    forked child's environment when it differs from the plain process's ``env``."""
    reason = fallback_reason
    if server is not None and entry and child_argv is not None and reason is None:
        try:
            return server.spawn(entry, child_argv, log_path=log_path,
                                env=env if child_env is None else child_env, cwd=cwd)
        except ForkServerUnavailable as exc:
            reason = str(exc)
    elif server is None and reason is None and entry:
        reason = "no fork server"
    started = time.time()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(list(plain_argv), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                                start_new_session=True, preexec_fn=die_with_parent())
    return PlainChild(pid=proc.pid, log_path=Path(log_path), started_at=started, proc=proc,
                      fallback_reason=reason)
