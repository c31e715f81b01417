"""Issue 27 item 1: every writer writes through what the output path is (harness.publish.outfile),
through the real entry point: ``sweep report -o`` and a sweep's ``--junit`` and step
summary. A regular file is replaced atomically; a symlink is written through (it stays a
link); a device or a FIFO is written in place, never turned into a regular file; a FIFO
nobody reads is refused in one line."""
from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from tests.conftest import ROOT, env_without, run_cli

FIXTURE = ROOT / "tests" / "reports" / "fixtures" / "lab" / "fvp.jsonl.gz"


def run(*args, cwd: Path = ROOT, env: dict | None = None, timeout: float = 180):
    """The CLI; by default without the caller's GITHUB_STEP_SUMMARY (it would be written)."""
    return run_cli(*args, cwd=cwd, timeout=timeout,
                   env=env if env is not None else env_without("GITHUB_STEP_SUMMARY"))


def _reader(fifo: Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as fh:   # blocks until the writer opens it
            got.append(fh.read())
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, got


def test_report_o_writes_through_a_symlink(tmp_path):
    target = tmp_path / "real.md"
    target.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    proc = run("report", FIXTURE, "-o", link)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("# ")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_report_o_writes_a_fifo_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    t, got = _reader(fifo)
    proc = run("report", FIXTURE, "-o", fifo)
    t.join(10)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got and got[0].decode().startswith("# ")


def test_report_o_to_a_fifo_nobody_reads_is_one_line(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = run("report", FIXTURE, "-o", fifo, timeout=60)
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "FIFO with no reader" in lines[0], lines
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_report_o_to_a_full_device_stays_a_device(tmp_path):
    """A node of /dev/full (char 1,7) made in tmp: the old writer replaced it with a
    regular file (as root, /dev/full itself)."""
    dev = tmp_path / "full"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except OSError as e:
        pytest.skip(f"cannot make a device node here: {e}")
    proc = run("report", FIXTURE, "-o", dev)
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], lines
    assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_a_sweep_writes_junit_and_step_summary_through_links_and_fifos(tmp_path):
    """The same rule for the other writers: --junit through a symlink, the step summary
    into a FIFO."""
    junit_target = tmp_path / "j.xml"
    junit_target.write_text("")
    junit = tmp_path / "junit-link.xml"
    junit.symlink_to(junit_target)
    fifo = tmp_path / "summary"
    os.mkfifo(fifo)
    t, got = _reader(fifo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["GITHUB_STEP_SUMMARY"] = str(fifo)
    proc = run("--residues", "0", "--no-progress", "--out", tmp_path / "o", "--junit", junit,
               cwd=tmp_path, env=env)
    t.join(10)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert junit.is_symlink() and junit_target.read_text().startswith("<?xml")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and got and b"residue" in got[0]
