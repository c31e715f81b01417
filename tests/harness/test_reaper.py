"""The run's reaper (``harness/backends/_reaper.py``, started by ``harness.serve.orphans.GroupReaper``)
ends what a dead sweep started, including a server spawned in the instant before its
registration reached the reaper: it carries the sweep's token in its environment.

CI found that instant (``test_teardown_groups.py::test_a_killed_sweep_takes_a_wrappers_server_with_it``,
1 run in 3 on a loaded 2-core box): the sweep was SIGKILLed after its wrapper had forked the
server but before the spawn's "+PGID" line was written, so nobody ended the server. These
tests make the instant itself: a process that carries the token and was never registered."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from harness.serve import orphans
from harness.serve.orphans import OWNER_ENV, GroupReaper
from tests.conftest import ROOT

REAPER = ROOT / "harness" / "backends" / "_reaper.py"


def _sleeper(token: str) -> subprocess.Popen:
    """A stand-in server in a session of its own, carrying ``token`` as a server does."""
    return subprocess.Popen(["sleep", "60"], env={**os.environ, OWNER_ENV: token},
                            start_new_session=True)


def _end(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_a_dead_owners_unregistered_server_is_ended_by_its_token():
    reaper = subprocess.Popen([sys.executable, str(REAPER), "--environ", f"{OWNER_ENV}=7:1.000"],
                              stdin=subprocess.PIPE, start_new_session=True)
    ours, other = _sleeper("7:1.000"), _sleeper("8:1.000")
    try:
        reaper.stdin.close()   # the owner died: no "." came
        assert reaper.wait(timeout=30) == 0
        assert ours.wait(timeout=10) == -signal.SIGTERM
        assert other.poll() is None   # another sweep's server
    finally:
        _end(ours, other)


def test_after_a_clean_end_the_token_is_left_alone():
    """A clean end (``.``): the owner stopped its servers; what still carries its token
    belongs to another run of the same process (the Python API), not to the reaper."""
    reaper = subprocess.Popen([sys.executable, str(REAPER), "--environ", f"{OWNER_ENV}=7:2.000"],
                              stdin=subprocess.PIPE, start_new_session=True)
    kept = _sleeper("7:2.000")
    try:
        reaper.stdin.write(b".\n")
        reaper.stdin.close()
        assert reaper.wait(timeout=30) == 0
        assert kept.poll() is None
    finally:
        _end(kept)


def _own_token(monkeypatch, token: str) -> str:
    """This test's own sweep token: the worker's real one may be carried by a server
    another test of this process keeps running."""
    monkeypatch.setattr(orphans, "owner_token", lambda: token)
    return token


def test_the_runs_reaper_knows_this_sweeps_token(monkeypatch):
    """``GroupReaper`` as a sweep starts it: its pipe closed as the kernel closes it when the
    sweep dies, a server that was never registered (the sweep's token) is ended."""
    _own_token(monkeypatch, f"{os.getpid()}:reaper-test")
    reaper = GroupReaper()
    server = _sleeper(orphans.owner_token())
    try:
        assert reaper.proc is not None
        reaper.proc.stdin.close()
        assert reaper.proc.wait(timeout=30) == 0
        try:
            code = server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        assert code == -signal.SIGTERM, _why_alive(server, f"{OWNER_ENV}={orphans.owner_token()}")
    finally:
        _end(server)


def _why_alive(server: subprocess.Popen, entry: str) -> str:
    """What the reaper could have seen of a server it did not end (CI of 9b651b3,
    2026-12-05: alive 10 s after the reaper exited 0, once): its environment's entry, its
    signal masks, and whether the reaper's own search finds it now."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("reaper_script", REAPER)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    try:
        env = open(f"/proc/{server.pid}/environ", "rb").read().split(b"\0")
        status = [ln for ln in open(f"/proc/{server.pid}/status").read().splitlines()
                  if ln.startswith(("State", "SigBlk", "SigIgn", "SigPnd", "ShdPnd"))]
    except OSError as e:
        return f"server {server.pid}: /proc unreadable ({e})"
    return (f"server {server.pid} alive (returncode {server.poll()}); entry in its environ: "
            f"{entry.encode() in env}; {status}; the reaper's search finds it now: "
            f"{server.pid in script.carrying(entry)}")


def test_a_clean_close_writes_the_end_mark(monkeypatch):
    _own_token(monkeypatch, f"{os.getpid()}:clean-test")
    reaper = GroupReaper()
    server = _sleeper(orphans.owner_token())
    try:
        reaper.close()
        assert reaper.proc.returncode == 0
        assert server.poll() is None
    finally:
        _end(server)
