"""A server's whole process group ends with it (issue 33 item 12): an ``--engine cmd``
wrapper that does not ``exec`` leaves nothing behind even when the sweep is SIGKILLed, and a
slot's next server boots only once every process of its last one is gone. The fake engine;
its tokenizer copy under the test's tmp dir marks every server process."""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import FAKE_ENGINE, ROOT, fake_cmd, processes_mentioning

pytestmark = pytest.mark.usefixtures("no_leftovers")
BOUND_S = 60


def sweep_argv(tok_dir, out, server_cmd: str, *extra: str) -> list[str]:
    return ["--engine", "cmd", "--model", str(tok_dir), "--server-cmd", server_cmd,
            "--context", "800", "--spec", "none", "--out", str(out), "--reports-dir",
            str(out / "reports"), "--no-progress", *extra]


def test_a_slots_next_boot_waits_until_its_last_server_is_gone(tmp_path, tok_dir, cli):
    # each fake server takes 1.5 s to exit after SIGTERM (a GPU server freeing memory):
    # longer than a fake server takes to start on a loaded 2-core box
    proc = cli.sweep(*sweep_argv(tok_dir, tmp_path / "results",
                                 fake_cmd(tok_dir, "--slow-exit", "1.5"),
                                 "--residues", "0-2", "--slots", "1"), reports=None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spans = []
    for log in (tmp_path / "results").glob("*.logs/*.log"):
        text = log.read_text()
        up = float(re.search(r"fake engine up at ([\d.]+)", text).group(1))
        gone = float(re.search(r"fake engine gone at ([\d.]+)", text).group(1))
        spans.append((up, gone))
    assert len(spans) == 3
    spans.sort()
    for (_, gone), (up, _) in zip(spans, spans[1:]):
        assert up >= gone, f"a server came up {gone - up:.3f} s before the last one was gone"


def _grandchildren(tok_dir, sweep_pid: int) -> list[psutil.Process]:
    """The fake servers a wrapper started (their parent is not the sweep)."""
    out = []
    for p in processes_mentioning(str(tok_dir)):
        try:
            argv = p.cmdline()
            if argv[1:2] == [str(FAKE_ENGINE)] and p.ppid() != sweep_pid:
                out.append(p)
        except psutil.Error:
            continue
    return out


# a real sweep in a subprocess with real servers: e2e (issue 50: the auto mark missed it)
@pytest.mark.e2e
def test_a_killed_sweep_takes_a_wrappers_server_with_it(tmp_path, tok_dir):
    # the wrapper forks the server and waits for it (no exec): the kernel's parent-death
    # signal reaches the wrapper only, and the server is its child in the same group
    wrapped = "sh -c " + shlex.quote(fake_cmd(tok_dir, "--reply-delay", "0.3") + "; exit $?")
    out = tmp_path / "results"
    argv = [sys.executable, "-m", "harness",
            *sweep_argv(tok_dir, out, wrapped, "--residues", "0-7", "--slots", "2")]
    sweep = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + BOUND_S
        while not _grandchildren(tok_dir, sweep.pid):
            assert sweep.poll() is None and time.monotonic() < deadline, "no wrapped server"
            time.sleep(0.01)
        servers = processes_mentioning(str(tok_dir))
        sweep.send_signal(signal.SIGKILL)
        sweep.wait(timeout=30)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    _, alive = psutil.wait_procs(servers, timeout=BOUND_S)
    assert not alive, f"escaped the killed sweep: {[p.cmdline()[:3] for p in alive]}"
