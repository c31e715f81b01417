"""The product, end to end: full 128-residue sweeps of the lab engine through the real
CLI, one fresh server per data point (issue 3's 'done when')."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from harness.engines import LAB_MODEL_DIR
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("no_leftovers")


def run_sweep(tmp_path: Path, *args: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess, list[dict]]:
    model = tmp_path / "model"  # a per-test copy: its path marks this test's servers
    if not model.exists():
        shutil.copytree(LAB_MODEL_DIR, model)
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "harness", "--model", str(model),
                           "--out", str(out), "--reports-dir", str(tmp_path / "reports"),
                           "--no-progress", "--slots", "1", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    files = list(out.glob("*.jsonl"))
    assert len(files) == 1, proc.stderr[-3000:]
    recs = [json.loads(l) for l in files[0].read_text().splitlines() if l.strip()]
    return proc, recs


def bad_cells(recs: list[dict]) -> dict[str, set[tuple[int, str]]]:
    out: dict[str, set] = defaultdict(set)
    for r in recs:
        out[r["config"]["patches"]]  # every configuration appears
        if r["verdict"] != "ok":
            out[r["config"]["patches"]].add((r["residue"], r["phase"], r["verdict"]))
    return out


def test_mtp_full_graphs_unpatched_breaks_exactly_residue_4_and_the_fix_holds(tmp_path):
    proc, recs = run_sweep(tmp_path, "--spec", "mtp", "--ctx", "huge", "--residues", "all",
                           "--cudagraph", "FULL_AND_PIECEWISE", "--patches", "none,all")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert len(recs) == 2 * 128 * 2
    bad = bad_cells(recs)
    assert bad["none"] == {(4, "self-hit", "broken")}
    assert bad["all"] == set()
    r4 = next(r for r in recs if r["residue"] == 4 and r["phase"] == "self-hit"
              and r["config"]["patches"] == "none")
    assert r4["computed_tail"] == 4 and r4["finish_reason"] == "stop"
    assert len(r4["answer"]) <= 1
    assert all(r["cached_tokens"] == 0 for r in recs if r["phase"] == "cold")
    assert all(r["prompt_tokens"] == r["target_len"] for r in recs)
    assert {r["target_len"] % 128 for r in recs} == set(range(128))
    report = next((tmp_path / "reports").glob("*.md")).read_text()
    assert "residue 4" in report


def test_dflash2_k7_breaks_exactly_residue_8(tmp_path):
    proc, recs = run_sweep(tmp_path, "--spec", "dflash2", "--draft-tokens", "7", "--ctx", "huge",
                           "--residues", "all", "--cudagraph", "FULL_AND_PIECEWISE",
                           "--patches", "none")
    assert proc.returncode == 1
    assert bad_cells(recs)["none"] == {(8, "self-hit", "broken")}
    r8 = next(r for r in recs if r["residue"] == 8 and r["phase"] == "self-hit")
    assert r8["computed_tail"] == 8


def test_main_job_preset_is_clean(tmp_path):
    # sweep --spec mtp --ctx huge: the preset keeps PIECEWISE, so every cell is clean
    proc, recs = run_sweep(tmp_path, "--spec", "mtp", "--ctx", "huge", "--residues", "risky")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {r["verdict"] for r in recs} == {"ok"}
    assert recs[0]["config"]["cudagraph_mode"] == "PIECEWISE"
    assert recs[0]["config_mismatch"] == []


@pytest.mark.parametrize("isolation,servers", [("reset", 1), ("shared", 1), ("fresh", 5)])
def test_isolation_modes_agree_on_the_lab(tmp_path, isolation, servers):
    proc, recs = run_sweep(tmp_path, "--spec", "mtp", "--ctx", "huge", "--residues", "2-6",
                           "--cudagraph", "FULL_AND_PIECEWISE", "--patches", "none",
                           "--isolation", isolation)
    logs = list((tmp_path / "results").glob("*.logs/*.log"))
    assert len(logs) == servers
    bad = {(r["residue"], r["phase"]): r["verdict"] for r in recs if r["verdict"] != "ok"}
    if isolation == "shared":
        # nothing resets the cache: a later cold request may hit what an earlier point
        # left behind, and the harness must say so instead of calling it cold
        assert all(v in ("broken", "invalid") for v in bad.values())
        assert bad.get((4, "self-hit")) == "broken"
    else:
        assert bad == {(4, "self-hit"): "broken"}
        assert all(r["cached_tokens"] == 0 for r in recs if r["phase"] == "cold")
    assert all(r["isolation"] == isolation for r in recs)


def test_reset_isolation_boots_each_configuration_about_once(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(LAB_MODEL_DIR, model)
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "harness", "--model", str(model), "--out",
                           str(out), "--reports-dir", str(tmp_path / "reports"), "--no-progress",
                           "--slots", "2", "--isolation", "reset", "--residues", "0-7",
                           "--cudagraph", "FULL_AND_PIECEWISE,PIECEWISE", "--patches", "none"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    # 2 configurations on 2 slots: one server each, plus at most one more when a slot that
    # finished its configuration helps with the other
    assert 2 <= len(list(out.glob("*.logs/*.log"))) <= 3
    recs = [json.loads(l) for l in next(out.glob("*.jsonl")).read_text().splitlines()]
    bad = {(r["config"]["cudagraph_mode"], r["residue"], r["phase"]) for r in recs
           if r["verdict"] != "ok"}
    assert bad == {("FULL_AND_PIECEWISE", 4, "self-hit")}
