"""The report library through the real command line (``python -m harness report|compare``)
on a run recorded by the real harness: what the CLI passes must reach the library."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import synth
from conftest import FIXTURES
from harness.report import render_markdown
from harness.store import load_manifest_for, load_records
from test_gate import _fake_gh

ROOT = Path(__file__).resolve().parents[2]


def _sweep(*args, env=None):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture
def recorded(tmp_path):
    for ext in (".jsonl", ".manifest.json"):
        shutil.copy(FIXTURES / "cmd" / f"fake-break4{ext}", tmp_path / f"fake-break4{ext}")
    return tmp_path / "fake-break4.jsonl"


def test_sweep_report_matches_the_library(recorded, tmp_path):
    expected = render_markdown(load_records([recorded]), [load_manifest_for(recorded)])
    proc = _sweep("report", recorded)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip("\n") == expected.rstrip("\n")
    out = tmp_path / "r.md"
    assert _sweep("report", recorded, "-o", out, "--full").returncode == 0
    assert out.read_text() == render_markdown(load_records([recorded]),
                                              [load_manifest_for(recorded)], full=True)


def test_sweep_compare_json_and_exit_code(recorded, tmp_path):
    clean = [dict(r, verdict="ok", answer="x", run_id="clean") for r in load_records([recorded])]
    base = synth.write_jsonl(tmp_path / "clean.jsonl", clean)
    proc = _sweep("compare", base, recorded, "--json")
    res = json.loads(proc.stdout)
    assert res["regressed"] == 2 and {r["residue"] for r in res["regressions"]} == {4}
    assert proc.returncode == 1
    proc = _sweep("compare", recorded, base)
    assert proc.returncode == 0 and "fixed: residue 4" in proc.stdout


def test_sweep_report_posts_through_gh(recorded, tmp_path):
    bindir, log = _fake_gh(tmp_path)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "r.md"
    proc = _sweep("report", recorded, "-o", out, "--gh-issue", "4", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(log.read_text()) == ["issue", "comment", "4", "--body-file", str(out)]
