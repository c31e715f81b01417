"""The manifest keeps a run's sweep flags as versioned JSON (``options``): ``--resume`` and
``sweep explain`` rebuild the run from them, and a manifest from before them (a command
line only) still loads. Through ``python -m harness`` on the lab engine."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from harness.settings.flag_manifest import FLAGS_VERSION
from tests.conftest import run_cli

# each test boots real lab servers (a sweep, then a resume or an explain)
pytestmark = [pytest.mark.usefixtures("no_leftovers"), pytest.mark.slow]


def sweep(*args) -> subprocess.CompletedProcess:
    return run_cli(*args, timeout=240)   # the one runner of the sweep CLI (conftest)


@pytest.fixture
def run(tmp_path: Path):
    out = tmp_path / "r"
    proc = sweep("--residues", "3-4", "--patches", "none", "--cudagraph", "FULL_AND_PIECEWISE",
                 "--seed", "0,1", "--slots", "2", "--out", str(out), "--no-progress")
    assert proc.returncode == 1, proc.stderr[-2000:]
    run_id = re.search(r"run (\d{8}-\d{6}-[0-9a-f]{4})", proc.stderr).group(1)
    return out, run_id, out / f"{run_id}.manifest.json"


def test_the_manifest_keeps_the_flags_and_resume_reads_them(run):
    out, run_id, path = run
    manifest = json.loads(path.read_text())
    opts = manifest["options"]
    assert opts["version"] == FLAGS_VERSION
    assert opts["flags"]["seed"] == [0, 1] and opts["flags"]["patches"] == "none"
    assert opts["flags"]["residues"] == "3-4"
    # the command line is only what the user typed: resume no longer parses it
    manifest["command"] = "sweep --this-flag-does-not-exist"
    path.write_text(json.dumps(manifest))
    proc = sweep("--resume", run_id, "--out", str(out), "--no-progress")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "4 points already complete, 0 to run" in proc.stderr   # 2 residues x 2 documents
    # a flag the run did not have is still refused against the stored options
    proc = sweep("--resume", run_id, "--out", str(out), "--patches", "all")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--patches all differs from the run's --patches none" in proc.stderr


def test_a_manifest_from_before_the_options_block_still_resumes(run):
    out, run_id, path = run
    manifest = json.loads(path.read_text())
    del manifest["options"]
    path.write_text(json.dumps(manifest))
    proc = sweep("--resume", run_id, "--out", str(out), "--no-progress")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "4 points already complete, 0 to run" in proc.stderr


def test_options_of_a_newer_harness_are_refused_in_one_line(run):
    out, run_id, path = run
    manifest = json.loads(path.read_text())
    manifest["options"]["version"] = FLAGS_VERSION + 1
    path.write_text(json.dumps(manifest))
    proc = sweep("--resume", run_id, "--out", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "newer than this harness reads" in proc.stderr


def test_explain_builds_its_rungs_from_the_stored_options(run):
    out, run_id, path = run
    manifest = json.loads(path.read_text())
    manifest["command"] = "sweep --this-flag-does-not-exist"
    path.write_text(json.dumps(manifest))
    proc = sweep("explain", run_id, "--out", str(out), "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "residue 4 of" in proc.stdout and "patches → all" in proc.stdout
