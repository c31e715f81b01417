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
    script = _script()
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


def _script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("reaper_script", REAPER)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def _fake_process(proc, pid: int, environ: bytes, env_end: int = 0, flags: int = 0) -> None:
    """``/proc/PID`` as the reaper reads it: ``environ``, and ``stat`` with its state,
    flags (field 9) and env_end (field 51)."""
    after = ["S"] + ["0"] * 49        # fields 3..52
    after[6], after[48] = str(flags), str(env_end)
    (proc / str(pid)).mkdir(exist_ok=True)
    for name, data in (("environ", environ), ("stat", f"{pid} (sleep) {' '.join(after)}".encode())):
        part = proc / str(pid) / f".{name}"
        part.write_bytes(data)
        os.replace(part, proc / str(pid) / name)   # the reader sees either version, whole


def test_a_process_caught_inside_its_exec_is_read_again_until_it_has_an_environment(tmp_path):
    """CI of 9b651b3: ``Popen`` returns once the child's exec closed its descriptors, before
    the kernel wrote its new stack, so for that instant ``/proc/PID/environ`` reads empty.
    The reaper waits for such a process (env_end 0) instead of passing it by; a zombie, a
    kernel thread or a process started with no environment at all is not waited for."""
    import threading
    entry = f"{OWNER_ENV}=7:3.000"
    _fake_process(tmp_path, 101, b"")                               # ours, mid-exec
    _fake_process(tmp_path, 102, b"")                               # another's, mid-exec
    _fake_process(tmp_path, 103, b"", env_end=4096)                 # started with env -i
    _fake_process(tmp_path, 104, b"", flags=0x00208040)             # a kernel thread
    _fake_process(tmp_path, 105, b"A=1\0" + entry.encode() + b"\0")  # ours, settled
    script = _script()
    assert script.carrying(entry, settle=0, proc=str(tmp_path)) == {105}   # the old search

    def exec_finishes():
        for pid, env in ((101, entry), (102, f"{OWNER_ENV}=8:1.000")):
            _fake_process(tmp_path, pid, b"A=1\0" + env.encode() + b"\0", env_end=8192)
    later = threading.Timer(0.3, exec_finishes)
    later.start()
    try:
        assert script.carrying(entry, settle=30, proc=str(tmp_path)) == {101, 105}
    finally:
        later.cancel()


def test_an_exec_that_ends_between_the_reapers_two_reads_is_not_passed_by(tmp_path):
    """CI of c8df02b: the reaper read ``environ`` (empty: still inside the exec), the exec
    ended, and then ``stat`` said "out of the exec": the process was dropped as one with no
    environment. Here the exec ends at that exact instant, on every run."""
    entry = f"{OWNER_ENV}=7:3.000"
    _fake_process(tmp_path, 101, b"")
    script = _script()
    read = script._environ
    calls = []

    def environ_then_exec_ends(pid, proc):
        env = read(pid, proc)
        if not calls:
            calls.append(pid)
            _fake_process(tmp_path, 101, b"A=1\0" + entry.encode() + b"\0", env_end=8192)
        return env
    script._environ = environ_then_exec_ends
    assert script.carrying(entry, settle=30, proc=str(tmp_path)) == {101}
    assert calls == ["101"]


def test_the_stat_fields_the_reaper_reads_are_where_this_kernel_puts_them():
    """env_start and env_end (fields 50, 51) bound exactly what ``environ`` reads, for this
    process and for one started with no environment (env_end set: not waited for)."""
    script = _script()
    # Popen returns while the child may still be inside its exec (env_end 0: the very window
    # the reaper waits out; README run 5 of d69ad9e caught it here). A shell with no
    # environment that has printed a line is past its exec: read that line first.
    empty = subprocess.Popen(["/bin/sh", "-c", "echo up; read line"], env={},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert empty.stdout.readline() == b"up\n"
        for pid in (os.getpid(), empty.pid):
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/environ", "rb") as f:
                size = len(f.read())
            assert int(fields[48]) - int(fields[47]) == size and int(fields[48]) > 0
            assert not script._mid_exec(str(pid), "/proc")
        assert size == 0   # the env -i process: empty, and still not mid-exec
    finally:
        _end(empty)
        empty.stdin.close()
        empty.stdout.close()
