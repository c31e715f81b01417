"""The fork server: a parent that imports a module list once and forks one child per
request; the child becomes the served program (``-m module`` as ``python -m`` would run it,
or ``module:function`` called with argv).

Run as ``python -m engine.prefork --preload torch,vllm ...`` by :class:`ForkServer`; it
speaks JSON lines on the stdin/stdout it was started with and nothing else: its own
stdout and stderr go to its log, so an imported library's print cannot corrupt the channel.

Why it is safe to fork: the parent refuses to fork (the client then falls back to a plain
process) when CUDA is initialised in it, because a forked child would share a CUDA
context it cannot use. Nothing else here touches a device.

Nothing is left behind: each child is a session leader with ``PR_SET_PDEATHSIG`` = SIGKILL
(it dies with this parent); a watchdog forked before the imports holds a pipe from this
parent and, when the pipe closes (this parent died, even by SIGKILL), kills every session
it was told about, grandchildren included; on its stdin closing or SIGTERM this parent
kills its sessions itself and exits. This parent has ``PR_SET_PDEATHSIG`` = SIGTERM too.
"""
from __future__ import annotations

import atexit
import ctypes
import importlib
import json
import os
import runpy
import signal
import sys
import time
import traceback

from ._proctree import kill_session

__all__ = ["main"]

PR_SET_PDEATHSIG = 1
# Variables a library may read once at import: a child whose env differs in them runs
# with the parent's import-time reading, so each reply names them.
_IMPORT_TIME_PREFIXES = ("VLLM_", "TORCH", "TRITON_", "CUDA_", "PYTHON", "HF_", "TRANSFORMERS_",
                         "OMP_", "MKL_", "OPENBLAS_", "TOKENIZERS_", "NCCL_", "LD_")


def _pdeathsig(sig: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:          # a torch without CUDA support: nothing to share
        return False


class _Server:
    def __init__(self, ctl_in: int, ctl_out: int) -> None:
        self.ctl_in = os.fdopen(ctl_in, "rb", buffering=0)
        self.ctl_out = ctl_out
        self.children: dict[int, int | None] = {}   # pid -> returncode once reaped
        self.watchdog_fd: int | None = None
        self.watchdog_pid: int | None = None
        self.import_env = dict(os.environ)
        self.read_at_import: set[str] = set()    # variables the imports read (_EnvReads)
        self.pid = os.getpid()

    def send(self, obj: dict) -> None:
        os.write(self.ctl_out, (json.dumps(obj) + "\n").encode())

    # -- watchdog --------------------------------------------------------------------
    def start_watchdog(self) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            _watchdog(r, keep_stderr=True)
        os.close(r)
        self.watchdog_fd = w
        self.watchdog_pid = pid      # exits by itself when this parent's pipe end closes

    def tell_watchdog(self, pid: int) -> None:
        if self.watchdog_fd is not None:
            os.write(self.watchdog_fd, f"{pid}\n".encode())

    # -- lifetime --------------------------------------------------------------------
    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            # every child, known yet or not: one that exits before spawn() records it
            # (SIGCHLD arrives between fork and that line) keeps its exit code
            self.children[pid] = os.waitstatus_to_exitcode(status)

    def shutdown(self, *_: object) -> None:
        for pid, rc in list(self.children.items()):
            if rc is None:
                kill_session(pid, grace=5.0)
        self.reap()
        os._exit(0)

    # -- requests --------------------------------------------------------------------
    def serve(self) -> None:
        buf = b""
        while True:
            data = self.ctl_in.read(65536)
            if not data:
                self.shutdown()
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    self.handle(json.loads(line))

    def handle(self, req: dict) -> None:
        self.reap()
        op, rid = req.get("op"), req.get("id")
        try:
            if op == "spawn":
                self.send({"id": rid, "ok": True, **self.spawn(req)})
            elif op == "poll":
                pid = int(req["pid"])
                self.send({"id": rid, "ok": True, "known": pid in self.children,
                           "returncode": self.children.get(pid)})
            elif op == "exit":
                self.send({"id": rid, "ok": True})
                self.shutdown()
            else:
                self.send({"id": rid, "ok": False, "error": f"unknown op {op!r}"})
        except (_Refused, KeyError, TypeError, ValueError, OSError) as exc:
            # A malformed request or a failed fork (ENOMEM, EAGAIN) is refused, not fatal.
            self.send({"id": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}"
                       if not isinstance(exc, _Refused) else str(exc)})

    def env_diff(self, env: dict[str, str]) -> list[str]:
        keys = set(env) | set(self.import_env)
        return sorted(k for k in keys if k.startswith(_IMPORT_TIME_PREFIXES)
                      and env.get(k) != self.import_env.get(k))

    def read_differs(self, env: dict[str, str]) -> list[str]:
        """Variables a preloaded module read at import whose value this child's env
        changes: forked, the child would run with the parent's reading of them."""
        return sorted(k for k in self.read_at_import if env.get(k) != self.import_env.get(k))

    def spawn(self, req: dict) -> dict:
        if _cuda_initialized():
            raise _Refused("CUDA is initialised in the fork server; a forked child "
                           "would inherit a context it cannot use")
        entry, argv = str(req["entry"]), [str(a) for a in req.get("argv", [])]
        _check_entry(entry)
        env = {str(k): str(v) for k, v in req["env"].items()}
        read = self.read_differs(env)
        if read:
            raise _Refused(f"a preloaded module read {', '.join(read[:6])}"
                           f"{' ...' if len(read) > 6 else ''} at import and this server's "
                           "value differs: a forked child would keep the parent's")
        try:
            logfd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise _Refused(f"cannot open log {req['log']}: {exc}") from None
        sys.stdout.flush()
        sys.stderr.flush()
        forked_at = time.time()
        pid = os.fork()
        if pid == 0:
            self.become_child(logfd, entry, argv, env, req.get("cwd"))
        os.close(logfd)
        self.children.setdefault(pid, None)
        self.tell_watchdog(pid)
        return {"pid": pid, "forked_at": forked_at, "env_differs": self.env_diff(env)}

    def become_child(self, logfd: int, entry: str, argv: list[str], env: dict[str, str],
                     cwd: str | None) -> None:
        code = 1
        try:
            os.setsid()
            _pdeathsig(signal.SIGKILL)
            if os.getppid() != self.pid:     # the parent died between fork and prctl
                os._exit(70)
            os.dup2(logfd, 1)
            os.dup2(logfd, 2)
            os.close(logfd)
            for fd in (self.ctl_in.fileno(), self.ctl_out, self.watchdog_fd):
                if fd is not None:
                    os.close(fd)
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.environ.clear()
            os.environ.update(env)
            _extend_sys_path(env.get("PYTHONPATH", ""))
            if cwd:
                os.chdir(cwd)
            code = _run_entry(entry, argv)
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:       # the child's own crash: its log shows why
            traceback.print_exc()
            code = 1
        finally:
            try:
                atexit._run_exitfuncs()
            finally:
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:
                        pass
                os._exit(code)


class _EnvReads:
    """While the imports run, records every variable read through ``os.environ`` (a
    ``get``, ``in`` or ``os.getenv`` all end in ``__getitem__``), missing ones included:
    a module that read one at import keeps the parent's reading in each forked child.
    Reads from C (``getenv(3)``) are not seen; ``env_differs`` names those by prefix."""

    def __init__(self, keys: set[str]) -> None:
        self.keys = keys

    def __enter__(self) -> "_EnvReads":
        cls, keys = type(os.environ), self.keys
        self._orig = orig = cls.__getitem__

        def getitem(env, key):
            # os.environb is the same class with bytes keys: record the name as str (a
            # bytes key sorted beside str ones crashed the ready message on the H200)
            keys.add(os.fsdecode(key) if isinstance(key, bytes) else key)
            return orig(env, key)
        cls.__getitem__ = getitem
        return self

    def __exit__(self, *exc: object) -> None:
        type(os.environ).__getitem__ = self._orig


class _Refused(Exception):
    """A request this server cannot serve; the client falls back to a plain process."""


def _check_entry(entry: str) -> None:
    if entry.startswith("-m "):
        if entry[3:].strip():
            return
    elif ":" in entry and all(entry.split(":", 1)):
        return
    raise _Refused(f"entry must be '-m module' or 'module:function', got {entry!r}")


def _run_entry(entry: str, argv: list[str]) -> int:
    if entry.startswith("-m "):
        module = entry[3:].strip()
        sys.argv = [module, *argv]
        # `python -m module` runs it only as __main__: a copy preloaded under its own name
        # goes, so the child's module state is the plain run's (its imports stay loaded).
        sys.modules.pop(module, None)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    module, func = entry.split(":", 1)
    sys.argv = [module, *argv]
    return _exit_code(getattr(importlib.import_module(module), func)(argv))


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _extend_sys_path(pythonpath: str) -> None:
    # sys.path was fixed when this parent started; a child's PYTHONPATH must still win.
    for entry in reversed([p for p in pythonpath.split(os.pathsep) if p]):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def _watchdog(r: int, keep_stderr: bool) -> None:
    """Forked before the imports: small. Reads session ids; at EOF kills them all."""
    try:
        os.setsid()
        os.dup2(r, 3)
        os.closerange(4, 1 << 16)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        if not keep_stderr:
            os.dup2(devnull, 2)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        sids: set[int] = set()
        buf = b""
        while data := os.read(3, 4096):
            buf += data
            *lines, buf = buf.split(b"\n")
            sids.update(int(x) for x in lines if x.strip())
        for sid in sorted(sids):
            kill_session(sid, grace=2.0)
    finally:
        os._exit(0)


# -- optional imports, each first tried in a forked probe ---------------------------------
# An import cannot be undone: a module that initialises CUDA at import (vLLM's bundled FLA
# ops ask torch for the device name at module level: `third_party/flash_linear_attention/
# ops/utils.py`, `is_nvidia_hopper`) would make this parent unusable for good. So a forked
# probe imports the optional list first, one module at a time, and says after each whether
# CUDA is now initialised; this parent imports a module only once the probe has imported it
# cleanly, so the two run side by side. A module the probe saw initialise CUDA is skipped
# (the child imports it itself, after the fork) and a new probe goes on with the rest.


def _probe(modules: list[str]) -> tuple[int, int]:
    """Fork a probe that imports ``modules`` in order and writes one JSON line per module:
    ``{"i": index, "error": str | None, "cuda": bool}``; it stops after the first CUDA
    one. Returns (pid, read end of its pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            for i, module in enumerate(modules):
                error = None
                try:
                    importlib.import_module(module)
                except BaseException as exc:  # noqa: BLE001 - reported, the parent skips it
                    error = f"{type(exc).__name__}: {exc}"
                cuda = _cuda_initialized()
                os.write(w, (json.dumps({"i": i, "error": error, "cuda": cuda}) + "\n").encode())
                if cuda:
                    break
        finally:
            os._exit(0)
    os.close(w)
    return pid, r


def _import_optional(optional: list[str]) -> tuple[dict[str, str], list[str]]:
    """Import what the probes allow. Returns (import failures, modules skipped because
    importing them initialised CUDA in a probe)."""
    failed: dict[str, str] = {}
    skipped: list[str] = []
    remaining = list(optional)
    while remaining:
        pid, r = _probe(remaining)
        done = 0
        with os.fdopen(r, "rb") as lines:
            for line in lines:
                step = json.loads(line)
                module = remaining[step["i"]]
                done = step["i"] + 1
                if step["cuda"]:
                    skipped.append(module)
                    break
                if step["error"]:
                    failed[module] = step["error"]
                    continue
                try:
                    importlib.import_module(module)
                except BaseException as exc:  # noqa: BLE001 - optional: the child imports it
                    failed[module] = f"{type(exc).__name__}: {exc}"
        os.waitpid(pid, 0)
        if done == 0:       # the probe died importing the first one (a crash, not Python)
            failed[remaining[0]] = "the import probe died importing it"
            done = 1
        remaining = remaining[done:]
    return failed, skipped


def _parse(argv: list[str]) -> tuple[list[str], list[str]]:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m engine.prefork")
    ap.add_argument("--preload", default="", help="modules that must import (comma list)")
    ap.add_argument("--optional", default="", help="modules to try (comma list)")
    args = ap.parse_args(argv)
    split = lambda s: [m for m in s.split(",") if m]  # noqa: E731
    return split(args.preload), split(args.optional)


def main(argv: list[str] | None = None) -> int:
    preload, optional = _parse(sys.argv[1:] if argv is None else argv)
    # The channel moves off fds 0/1; they become /dev/null and this server's log (fd 2).
    ctl_in, ctl_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    server = _Server(ctl_in, ctl_out)
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        server.send({"event": "unusable", "reason": f"needs Linux fork, have {sys.platform}"})
        return 3
    pdeath = _pdeathsig(signal.SIGTERM)
    signal.signal(signal.SIGTERM, server.shutdown)
    signal.signal(signal.SIGHUP, server.shutdown)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the client's Ctrl-C is the client's
    server.start_watchdog()
    t0 = time.monotonic()
    # The required list: a module that initialises CUDA makes this parent unusable, and the
    # reason names it (issue 17: on the H200 the whole list did, and nobody knew which).
    for module in preload:
        try:
            with _EnvReads(server.read_at_import):
                importlib.import_module(module)
        except BaseException as exc:  # noqa: BLE001 - any failure makes the server unusable
            server.send({"event": "unusable", "reason": f"import {module} failed: "
                         f"{type(exc).__name__}: {exc}"})
            server.shutdown()
        if _cuda_initialized():
            server.send({"event": "unusable", "reason": "importing the preload list "
                         f"initialised CUDA (first seen after importing {module})"})
            server.shutdown()
    with _EnvReads(server.read_at_import):
        failed, skipped = _import_optional(optional)
    if _cuda_initialized():     # a probe said clean and the parent's import still did it
        server.send({"event": "unusable", "reason": "importing the optional list initialised "
                     "CUDA although its probe did not"})
        server.shutdown()
    import threading

    server.send({"event": "ready", "pid": server.pid, "import_s": round(time.monotonic() - t0, 3),
                 "preloaded": preload, "optional_failed": failed,
                 "optional_skipped_cuda": skipped, "pdeathsig": pdeath,
                 "env_read_at_import": sorted(server.read_at_import),
                 "threads": [t.name for t in threading.enumerate()],
                 "python": sys.version.split()[0]})
    # Reap each child the moment it exits (after the imports: their probes wait for their
    # own children). Unreaped, an exited server stays a zombie until the next request, and
    # the harness, which waits for the process to go, waited its whole grace twice: 10 s
    # of teardown per point (issue 27 item 9).
    signal.signal(signal.SIGCHLD, lambda *_: server.reap())
    server.serve()
    return 0
