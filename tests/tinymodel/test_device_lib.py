"""The device scripts' shared steps (engine/tinymodel/scripts/device_lib.sh) that decide what
comes back from a device call: at most 8 files from $OUT, shared by every script the call
runs (2026-12-01: gpu_shapes.sh beside gpu_find_state.sh left 9, and the records' tgz was
lost). Run through bash, as the scripts source them."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "engine" / "tinymodel" / "scripts" / "device_lib.sh"


def _bash(script: str, out: Path, cwd: Path | None = None, timeout: int = 60,
          env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "OUT": str(out), **(env or {})}
    return subprocess.run(["bash", "-c", f"source {LIB}; {script}"], cwd=cwd or ROOT, env=e,
                          capture_output=True, text=True, timeout=timeout)


def test_dev_out_check_says_when_out_holds_more_than_comes_back(tmp_path):
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    for i in range(7):
        (out / f"f{i}").write_text("x")
    (out / "sub" / "g").write_text("x")           # files in folders count too
    ok = _bash("dev_out_check", out)
    assert ok.returncode == 0 and "WARNING" not in ok.stdout
    (out / "f9").write_text("x")
    over = _bash("dev_out_check", out)
    assert over.returncode == 1
    assert "WARNING: $OUT holds 9 files, only 8 come back" in over.stdout


def test_dev_pack_packs_the_folder_in_one_file(tmp_path):
    work = tmp_path / "work" / f"devlib-test-{os.getpid()}"
    (work / "r.logs").mkdir(parents=True)
    (work / "r.md").write_text("# report\n")
    (work / "r.logs" / "s.log").write_text("server line\n")
    out = tmp_path / "out"
    out.mkdir()
    try:
        res = _bash(f"dev_pack {work.name}", out, env={"DEV_WORK": str(work.parent)})
        assert res.returncode == 0, res.stdout + res.stderr
        assert [p.name for p in out.iterdir()] == [f"{work.name}.tgz"]
        names = tarfile.open(out / f"{work.name}.tgz").getnames()
        assert f"{work.name}/r.md" in names and f"{work.name}/r.logs/s.log.gz" in names
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_dev_summary_keeps_the_verdicts_and_a_boot_failures_root_cause(tmp_path):
    """The summary is what comes back when the tgz does not: each report's headline, rule
    and Load lines, and the error lines above vLLM's "See root cause above"."""
    d = tmp_path / "w"
    (d / "ok_run").mkdir(parents=True)
    (d / "bad_run" / "x.logs").mkdir(parents=True)
    (d / "timings.txt").write_text("ok_run rc=0 10s\nend 12s\n")
    (d / "ok_run" / "r1.md").write_text(
        "# Residue sweep: A\n\n1 configuration, 3 data points: all ok.\n\n## Results\n\n| t |\n\n"
        "## Summary per configuration\n\n- **Result:** 3 clean.\n"
        "- **Bug B rule:** predicts residue 4; **the sweep agrees**.\n\n"
        "## Load\n\nEach measured request ran beside...\n\n| configuration | load |\n"
        "| x | 4 steady: chunk 4 beside 4 decode |\n\n## Timing\n\n| not this |\n")
    (d / "bad_run" / "r2.md").write_text(
        "# Residue sweep: B\n\n2 points not ok.\n\n## Results\n\n| **boot-fail: ...** |\n")
    (d / "bad_run" / "x.logs" / "s.log").write_text(
        "(EngineCore pid=12) ValueError: To serve at least one request with the model's max "
        "seq len (4096), 1.2 GiB KV cache is needed, which is larger than the available KV "
        "cache memory (0.3 GiB)\n"
        "(APIServer pid=11) RuntimeError: Engine core initialization failed. See root cause "
        "above.\n")
    res = _bash(f"dev_summary {d} ok_run bad_run missing_run", tmp_path)
    assert res.returncode == 0, res.stderr
    s = res.stdout
    assert "ok_run rc=0 10s" in s and "1 configuration, 3 data points: all ok." in s
    assert "- **Bug B rule:** predicts residue 4; **the sweep agrees**." in s
    assert "| x | 4 steady: chunk 4 beside 4 decode |" in s and "| not this |" not in s
    assert "larger than the available KV cache memory" in s
    assert "Engine core initialization failed" not in s
    assert "## missing_run" in s and "no report" in s


def _on_the_lab(script: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """A device script run with the lab engine standing in for vLLM (budget 300 s); it must
    exit 0. Returns the run and its $OUT."""
    out = tmp_path / "out"
    res = subprocess.run(["bash", script, "300"], cwd=ROOT,
                         env={**os.environ, "ENGINE": "lab", "OUT": str(out),
                              "PYTHON": sys.executable, "DEV_WORK": str(tmp_path / "work")},
                         capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res, out


@pytest.mark.slow
def test_gpu_shapes_on_the_lab_returns_two_files(tmp_path):
    """benchmarks/gpu_shapes.sh with the lab engine standing in for vLLM: its $OUT is the tgz
    (with every report inside) and the summary, nothing else (~30 s on a 2-vCPU box)."""
    res, out = _on_the_lab("benchmarks/gpu_shapes.sh", tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["shapes.tgz", "shapes_summary.md"]
    reports = {Path(n).parts[1] for n in tarfile.open(out / "shapes.tgz").getnames()
               if n.endswith(".md")}
    assert reports == {"a_budget", "a_budget_patched", "b_load", "b_load_fresh",
                       "c_preempt_lab"}
    s = (out / "shapes_summary.md").read_text()
    for name in reports:
        assert f"## {name}" in s
    assert "broken: residue 484" in s and "WARNING" not in res.stdout


@pytest.mark.slow
def test_gpu_history_on_the_lab_returns_records_reports_and_summary(tmp_path):
    """benchmarks/gpu_history.sh with the lab standing in for vLLM: $OUT is the tgz (both
    reports inside), both records files and the summary with every history's cells (~45 s
    on a 2-vCPU box)."""
    res, out = _on_the_lab("benchmarks/gpu_history.sh", tmp_path)
    assert sorted(p.name for p in out.iterdir()) == [
        "history_ngram.tgz", "history_ngram_fap_all.jsonl.gz", "history_ngram_pw_none.jsonl.gz",
        "history_ngram_summary.md"]
    reports = {Path(n).parts[1] for n in tarfile.open(out / "history_ngram.tgz").getnames()
               if n.endswith(".md")}
    assert reports == {"fap_all", "pw_none"}
    s = (out / "history_ngram_summary.md").read_text()
    for name in ("none", "abort-retry", "interleave", "sibling", "evict", "next-turn"):
        assert f"history={name} |" in s
    assert "## fap_all" in s and "## pw_none" in s and "WARNING" not in res.stdout


def test_no_device_script_works_in_a_fixed_folder():
    """Each device script's work folder is under ``$DEV_WORK`` (device_lib.sh; /tmp/work on
    the device): with a fixed /tmp/work/NAME, two suites on one box emptied each other's
    folder (the ``rm -rf "$W"`` of the script's start) and a test of gpu_shapes.sh found one
    report of five."""
    scripts = [p for p in (ROOT / "benchmarks").glob("gpu_*.sh") if "device_lib.sh" in p.read_text()]
    assert len(scripts) >= 6
    fixed = [p.name for p in [*scripts, LIB] if "/tmp/work/" in p.read_text()]
    assert not fixed, fixed
