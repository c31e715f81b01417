"""Nothing lost, nothing doubled (issue 33 item 12): a disk that fills up mid-sweep, and a
``--resume`` of a run that is still going. The fake engine through ``--engine cmd``; its
tokenizer copy under the test's tmp dir marks the servers, so ``no_leftovers`` sees them."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from harness.records.record_check import read_record_file
from tests.conftest import ROOT, fake_cmd, run_cli, whole_records

pytestmark = pytest.mark.usefixtures("no_leftovers")


def flags(tok_dir, out, *extra: str) -> list[str]:
    return ["--engine", "cmd", "--model", str(tok_dir), "--server-cmd",
            fake_cmd(tok_dir, *extra), "--context", "800", "--residues", "0-7", "--slots", "1",
            "--spec", "none", "--out", str(out), "--reports-dir", str(out / "reports"),
            "--no-progress"]


def cells(out) -> Counter:
    (path,) = out.glob("*.jsonl")
    return Counter((r["residue"], r["phase"]) for r in read_record_file(path))


def test_a_full_disk_is_one_line_exit_5_and_every_record_kept(tmp_path, tok_dir, monkeypatch,
                                                              capsys):
    """The store's write seam says ENOSPC at the 6th record (as a 64 KiB tmpfs did, 81
    lines of traceback and exit 1): one line naming the file and the resume command, exit
    5, the 5 records before it whole, no server left; then --resume finishes the run with
    each cell once."""
    from harness.command import cli
    from harness.records import store
    real = store.ResultStore._write
    written = []

    def fill_up(self, data):
        if len(written) == 5:
            real(self, data[: len(data) // 2])   # half a line reached the disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(data)
        real(self, data)

    monkeypatch.setattr(store.ResultStore, "_write", fill_up)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as ended:
        cli.main(flags(tok_dir, out))
    err = capsys.readouterr().err
    assert ended.value.code == 5, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("sweep: cannot write the results: ") and "Traceback" not in err
    assert "No space left on device after 5 records" in last
    run_id = next(out.glob("*.manifest.json")).name.split(".")[0]
    assert f"continue with: sweep --resume {run_id} --out {out}" in last
    (path,) = out.glob("*.jsonl")
    assert len(read_record_file(path)) == 5             # every line a whole record
    assert not list(out.glob("*.servers.json")) and not list(out.glob("*.lock"))

    monkeypatch.setattr(store.ResultStore, "_write", real)
    r = run_cli("--resume", run_id, "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    assert set(cells(out).values()) == {1} and len(cells(out)) == 16


def test_resume_of_a_running_sweep_is_refused_and_a_killed_ones_is_not(tmp_path, tok_dir):
    """Two processes ran the same points into one file (464 records for 256 cells): the
    second is one line, exit 2, while the first runs; once the first is SIGKILLed (its lock
    dies with it) the resume runs, and each cell is on disk once."""
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "harness", *flags(tok_dir, out, "--reply-delay", "0.3")]
    first = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 120
        while not whole_records(out):
            assert first.poll() is None and time.monotonic() < deadline, "no record written"
            time.sleep(0.01)
        run_id = next(out.glob("*.manifest.json")).name.split(".")[0]
        second = run_cli("--resume", run_id, "--out", str(out), "--no-progress")
        assert second.returncode == 2, second.stderr[-3000:]
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"run {run_id} is still running (pid {first.pid}" in lines[0]
        assert first.poll() is None
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        first.stderr.close()
    assert list(out.glob("*.lock"))                 # the dead process's lock file is left
    resumed = run_cli("--resume", run_id, "--out", str(out), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert set(cells(out).values()) == {1} and len(cells(out)) == 16
