"""Servers die with the sweep: tied to it while it lives, ended by the next sweep if not.

A graceful end (Ctrl-C, SIGTERM, an error) stops every server itself (``server_pool``).
A sweep killed outright (SIGKILL, the OOM killer, a CI hard timeout) cannot, so:

- each server process gets ``PR_SET_PDEATHSIG`` = SIGTERM in the child before ``exec``
  (:func:`die_with_parent`, Linux): the kernel signals it when the sweep dies, and a
  vLLM server's own SIGTERM handler then stops its engine processes;
- each run keeps a pid file, ``<out>/<run-id>.servers.json`` (:class:`PidFile`, an
  observer of that run's own servers, ``server_pool.server_pids``): the
  sweep's pid and start time and, for every live server, its pid and start time (psutil's
  ``create_time``). It is rewritten on each start and stop and removed at a clean end;
- a new sweep or ``--resume`` in the same ``--out`` reads the pid files whose sweep is gone
  (:func:`end_orphans`) and ends what is left of their servers: the server process when
  its pid still has the recorded start time, and every process of the server's session
  (a server is a session leader; a child it left behind keeps the session id) started
  after it. A server spawned in the instant before its pid reached the file is found by
  the sweep's own pid and start time, which every server carries in its environment
  (``RESIDUE_LAB_SWEEP``, inherited by whatever it starts, even in another session); a
  ``--launcher prefork`` fork server carries it too.
  Processes are found by pid and start time, never by name; one line says what was ended.
- each run also starts a reaper (:class:`GroupReaper`: ``backends/_reaper.py``, in a
  session of its own, as each Ray worker has one): the run's servers are registered with
  it by process group as they start and stop, and when the sweep dies, however it dies,
  its pipe closes and it ends every group still registered, and every process carrying
  the sweep's token (one spawned in the instant before its registration reached the
  reaper). ``PR_SET_PDEATHSIG`` reaches
  only the process the sweep started: an ``--engine cmd`` wrapper that does not ``exec``
  died and its server, a grandchild in the same group, was left running until the next
  sweep (issue 33 item 12); the group kill covers it at once.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from engine.prefork import die_with_parent   # the one preexec_fn, shared with the fork server

__all__ = ["PIDS_SUFFIX", "OWNER_ENV", "owner_token", "die_with_parent", "PidFile",
           "GroupReaper", "end_orphans"]

PIDS_SUFFIX = ".servers.json"
OWNER_ENV = "RESIDUE_LAB_SWEEP"
_TIME_SLACK_S = 0.05   # create_time is rounded to clock ticks


def owner_token() -> str:
    """``pid:start-time`` of this sweep, put in every server's environment."""
    ident = _identity(os.getpid()) or {"pid": os.getpid(), "create_time": 0}
    return _token(ident)


def _token(ident: dict) -> str:
    return f"{ident['pid']}:{float(ident['create_time']):.3f}"


def _identity(pid: int) -> dict | None:
    try:
        return {"pid": pid, "create_time": psutil.Process(pid).create_time()}
    except psutil.Error:
        return None


class PidFile:
    """The pid file of one run: this sweep and its live servers, rewritten atomically."""

    def __init__(self, out_dir: Path, run_id: str) -> None:
        self.path = Path(out_dir) / f"{run_id}{PIDS_SUFFIX}"
        self.run_id = run_id
        self.servers: dict[int, dict] = {}
        self.sweep = _identity(os.getpid())

    def hook(self, event: str, server) -> None:
        """An observer of the run's ``server_pool.ServerGroup``: "started" adds a server,
        "stopped" drops it."""
        pid = getattr(getattr(server, "proc", None), "pid", None)
        if pid is None:
            return
        if event == "started":
            ident = _identity(pid)
            if ident is not None:
                self.servers[pid] = {**ident, "log": str(getattr(server, "log_path", ""))}
        else:
            self.servers.pop(pid, None)
        self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"run_id": self.run_id, "sweep": self.sweep,
                                       "servers": list(self.servers.values())}))
            os.replace(tmp, self.path)
        except OSError:
            pass   # bookkeeping for the next sweep: never a reason to fail this one

    def remove(self) -> None:
        """A clean end: every server was stopped."""
        for p in (self.path, self.path.with_name(self.path.name + ".tmp")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass


_REAPER = Path(__file__).resolve().parents[1] / "backends" / "_reaper.py"


class GroupReaper:
    """The run's reaper process: told ``+PGID`` as each server starts (a server leads its
    own session, so its pid is its group) and ``-PGID`` when it was stopped; it ends the
    groups still registered when its stdin closes (the sweep ended or died)."""

    def __init__(self) -> None:
        try:   # --environ: what every server of this sweep carries (owner_token)
            self.proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, str(_REAPER), "--environ", f"{OWNER_ENV}={owner_token()}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True)
        except OSError:
            self.proc = None   # the pid file and the next sweep are still there

    def hook(self, event: str, server) -> None:
        """An observer of the run's ``server_pool.ServerGroup``."""
        pid = getattr(getattr(server, "proc", None), "pid", None)
        if pid is None or self.proc is None or self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write(f"{'+' if event == 'started' else '-'}{pid}\n".encode())
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass

    def close(self, timeout: float = 15.0) -> None:
        """The run is over: the reaper ends what is still registered (nothing, after a
        clean end) and exits; waited for, so no process of the run outlives it. ``.``
        first: a clean end, so it leaves the processes carrying this sweep's token alone
        (another run of this process may own them); only a sweep that dies is swept by
        token too."""
        if self.proc is None:
            return
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.write(b".\n")
                self.proc.stdin.close()
            self.proc.wait(timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            pass


def _same(ident: dict | None) -> psutil.Process | None:
    """The process ``ident`` names, if that pid still has that start time."""
    if not ident:
        return None
    try:
        p = psutil.Process(int(ident["pid"]))
        if abs(p.create_time() - float(ident["create_time"])) <= _TIME_SLACK_S:
            return p
    except (psutil.Error, KeyError, TypeError, ValueError):
        pass
    return None


def _left_of(sweep: dict, servers: list[dict]) -> list[psutil.Process]:
    """What is still running of a dead sweep's servers: each recorded server, its
    session's members started after it, and any process started after the sweep whose
    environment names the sweep (pid and start time)."""
    found = {p.pid: p for p in map(_same, servers) if p is not None}
    sessions = {int(s["pid"]): float(s["create_time"]) - _TIME_SLACK_S for s in servers}
    since = float(sweep["create_time"]) - _TIME_SLACK_S
    token = _token(sweep)
    for p in psutil.process_iter(["create_time"]):
        try:
            born = p.info["create_time"]
            if born < since or p.pid in found or p.pid == os.getpid():
                continue
            sid = os.getsid(p.pid)
            if (sid in sessions and born >= sessions[sid]) \
                    or p.environ().get(OWNER_ENV) == token:
                found[p.pid] = p
        except (OSError, psutil.Error):
            continue
    return list(found.values())


def end_orphans(out_dir: Path, *, grace: float = 5.0) -> list[str]:
    """End the servers left running by earlier runs in ``out_dir`` whose sweep is gone;
    returns one line per run that had any. A pid file whose sweep still runs (a concurrent
    sweep into the same folder) is left alone."""
    lines = []
    for path in sorted(Path(out_dir).glob(f"*{PIDS_SUFFIX}")):
        try:
            data = json.loads(path.read_text())
            servers = list(data["servers"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        sweep = data.get("sweep")
        if not isinstance(sweep, dict) or _same(sweep) is not None:
            continue   # a sweep still running (or a file we cannot read): not ours to end
        try:
            procs = _left_of(sweep, [s for s in servers if isinstance(s, dict)])
        except (KeyError, TypeError, ValueError):
            continue
        for p in procs:
            _signal(p, signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace)
        for p in alive:
            _signal(p, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=grace)
        if procs:
            pids = ", ".join(str(p.pid) for p in procs)
            lines.append(f"sweep: ended {len(procs)} process(es) left running by run "
                         f"{data.get('run_id') or path.name} (its sweep, pid "
                         f"{sweep.get('pid')}, is gone): pid {pids}")
        try:
            path.unlink()
        except OSError:
            pass
    return lines


def _signal(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except psutil.Error:
        pass
