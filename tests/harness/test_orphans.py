"""Issue 27 item 3: servers die with the sweep, through the real entry point.

``kill -KILL`` of a running sweep: its servers go too (the kernel's parent-death signal),
and ``sweep --resume`` then finishes the run with no finished record lost. A server that
escaped the signal (a wrapper script's child, re-parented to init) is ended by the next
sweep in the same ``--out`` by its pid and start time, in one line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, fake_cmd, is_reaper, processes_mentioning, wait_for

pytestmark = pytest.mark.e2e   # real sweeps killed and resumed, with real servers

BOUND_S = 60


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _lines(out: Path) -> list[str]:
    return [ln for f in out.glob("*.jsonl") for ln in f.read_text().splitlines(keepends=True)]


def _whole(out: Path) -> list[str]:
    return [ln for ln in _lines(out) if ln.endswith("\n")]


def _start(tmp_path: Path, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", "--no-progress", "--slots", "1",
                             "--out", str(tmp_path / "o"), *map(str, args)], cwd=tmp_path,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _kill_mid_run(proc: subprocess.Popen, out: Path, *, reaper_too: bool = False,
                  marker: str | None = None) -> tuple[list[psutil.Process], list[str]]:
    """SIGKILL the sweep once two points are on disk and a server runs (``reaper_too``:
    its reaper first, ``harness.serve.orphans.GroupReaper``); returns the processes it had
    started and the whole records on disk at that moment."""
    sweep = psutil.Process(proc.pid)
    try:
        wait_for(lambda: len(_whole(out)) >= 4 and _servers_of(sweep)
                 and (marker is None or _next_server(out, marker)), BOUND_S,
                 "two finished points and a live server")
        kids = sweep.children(recursive=True)
        before = _whole(out)
        if reaper_too:
            for p in kids:
                if is_reaper(p):
                    p.kill()   # the sweep's child, not ours: dead once it is a zombie
                    wait_for(lambda: p.status() == psutil.STATUS_ZOMBIE, 10, "the reaper's end")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    return kids, before


def _next_server(out: Path, marker: str) -> list[psutil.Process]:
    """The server processes (command line naming ``marker``) started after the last record
    was written: the next point's, not the one still stopping after the last record (a
    loaded box can show the sweep between the two, and a kill then leaves no server)."""
    written = max(f.stat().st_mtime for f in out.glob("*.jsonl")) - 0.05   # clock ticks
    found = []
    for p in processes_mentioning(marker):
        try:
            if p.create_time() >= written:
                found.append(p)
        except psutil.Error:
            continue
    return found


def _servers_of(sweep: psutil.Process) -> list[psutil.Process]:
    """The sweep's children but its reaper (which runs from the start)."""
    out = []
    for p in sweep.children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and not is_reaper(p):
                out.append(p)
        except psutil.Error:
            continue
    return out


def _run_id(out: Path) -> str:
    (manifest,) = out.glob("*.manifest.json")
    return json.loads(manifest.read_text())["run_id"]


def _gone(procs: list[psutil.Process]) -> bool:
    return not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_kill_9_of_a_sweep_takes_its_servers_and_resume_loses_nothing(tmp_path):
    out = tmp_path / "o"
    kids, before = _kill_mid_run(_start(tmp_path, "--residues", "0-15"), out)
    assert kids
    try:
        wait_for(lambda: _gone(kids), 15, "the killed sweep's servers to end")
    finally:
        for p in kids:
            if p.is_running():
                p.kill()
    run_id = _run_id(out)
    proc = subprocess.run([sys.executable, "-m", "harness", "--resume", run_id, "--out",
                           str(out), "--no-progress"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = _lines(out)
    assert set(before) <= set(after)   # every finished record kept, byte for byte
    cells = [(json.loads(ln)["residue"], json.loads(ln)["phase"]) for ln in after]
    assert len(cells) == len(set(cells)) == 32
    assert not list(out.glob("*.servers.json"))   # a clean end leaves no pid file


def test_a_server_that_escaped_is_ended_by_the_next_sweep(tmp_path, tok_dir):
    """The server command is a shell that runs the real server as its child: the
    parent-death signal ends the shell, its child is re-parented and keeps serving. The
    run's reaper would end its group at once (test_teardown_groups.py); here it is killed
    with the sweep (a kill of every process of the run but the servers), so the server
    escapes, and the resumed sweep finds it by the pid file (pid + start time of the
    shell's session).
    Residue 2 never answers, so a server is surely running when the sweep is killed (and
    the resumed run records it as a timeout: exit 1)."""
    server = f"sh -c '{fake_cmd(tok_dir, '--hang-residue', '2')} & wait'"
    out = tmp_path / "o"
    _kill_mid_run(_start(tmp_path, "--engine", "cmd", "--model", tok_dir, "--server-cmd",
                         server, "--context", "800", "--residues", "0-3", "--timeout", "15"),
                  out, reaper_too=True, marker=str(tok_dir))
    wait_for(lambda: processes_mentioning(str(tok_dir)), 5, "the escaped server")
    escaped = processes_mentioning(str(tok_dir))
    proc = subprocess.run([sys.executable, "-m", "harness", "--resume", _run_id(out),
                           "--out", str(out), "--no-progress"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    try:
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        ended = [ln for ln in proc.stderr.splitlines() if "left running by run" in ln]
        assert len(ended) == 1 and "its sweep, pid" in ended[0], proc.stderr[-3000:]
        assert _gone(escaped), (ended, [(p.pid, os.getsid(p.pid), p.cmdline()) for p in escaped if p.is_running()])
        assert not processes_mentioning(str(tok_dir))
    finally:
        for p in processes_mentioning(str(tok_dir)):
            p.kill()
