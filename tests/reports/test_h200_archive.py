"""The archived H200 runs (reports/h200/): the committed reports are exactly what
``sweep report`` renders from the archived records, and the claims reports/h200/README.md
and the project README make are what the records say."""
from __future__ import annotations

import gzip
import os
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from harness.report import render_markdown
from harness.records.store import linked_runs, load_manifest_for, load_records, read_jsonl

H200 = Path(__file__).resolve().parents[2] / "reports" / "h200"
RESULTS = H200 / "results"
SHAPES = H200 / "shapes"   # issue 26: reports only, their records were lost (shapes/README.md)
PHASE3 = "20261130-"  # run ids of issue 8's phase 3 (ngram k = 3, controls, dense, rerun)
# run ids of issue 18's first-session runs (MTP, DFlash refused at boot, fresh ngram k = 4);
# the second session's are checked in test_h200_session2.py
ISSUE18 = ("20261201-091746", "20261201-092428")


def _phase3_paths() -> list[Path]:
    return sorted(RESULTS.glob(f"{PHASE3}*.jsonl.gz"))


def _report_lines() -> list[tuple[str, list[str]]]:
    """(output .md, [records files]) of every `report` line of regenerate.sh."""
    out = []
    for line in (H200 / "regenerate.sh").read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["report"]:
            out.append((words[1], words[2:]))
    return out


def _kept() -> list[str]:
    """The reports regenerate.sh keeps as they came back (`kept` lines): no records here."""
    out = []
    for line in (H200 / "regenerate.sh").read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["kept"]:
            out += words[1:]
    return out


def _page_lines() -> list[tuple[str, list[str]]]:
    """(output file, command) of every `page` line of regenerate.sh: a page a benchmark
    script prints from archived records ($R is the results folder)."""
    out = []
    for line in (H200 / "regenerate.sh").read_text().splitlines():
        words = shlex.split(line.replace("$R/", "results/"), comments=True)
        if words[:1] == ["page"]:
            out.append((words[1], words[2:]))
    return out


def test_regenerate_script_covers_every_report():
    made = {name for name, _ in _report_lines() if "/" not in name} | {
        name for name, _ in _page_lines() if "/" not in name}
    committed = {p.name for p in H200.glob("*.md")} - {"README.md", "summary.md"}
    assert made == committed and len(made) >= 10
    # reports in a folder (shapes/day2/): every one rendered by a `report` line, and back
    day2 = {f"shapes/day2/{p.name}" for p in (SHAPES / "day2").glob("*.md")}
    assert day2 == {name for name, _ in _report_lines() if name.startswith("shapes/day2/")}
    assert len(day2) == 7


def test_an_archived_explain_run_is_read_into_its_parents_report():
    """`sweep report` of gzipped records finds the gzipped explain run beside them
    (store.linked_runs): the committed explain-cold.md has its Explained section."""
    env = {**os.environ, "PYTHONPATH": str(H200.parents[1])}
    proc = subprocess.run([sys.executable, "-m", "harness", "report",
                           "results/20261202-012515-b8f4.jsonl.gz"], cwd=H200, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Explain run: `20261202-012927-1061`." in proc.stdout
    assert "| block size → 16 " in (H200 / "explain-cold.md").read_text()


@pytest.mark.parametrize("name,cmd", _page_lines(), ids=lambda v: v if isinstance(v, str) else "")
def test_committed_page_is_what_its_script_prints(name, cmd):
    """find-state.md, the restore comparisons and the cost table: rerun from the records."""
    assert cmd[0] == "python" and cmd[1].startswith("../../benchmarks/")
    env = {**os.environ, "PYTHONPATH": str(H200.parents[1])}
    proc = subprocess.run([sys.executable, *cmd[1:]], cwd=H200, env=env, capture_output=True,
                          text=True, timeout=300)
    # exactly the code the page calls for: compare_isolation exits 1 when a cell differs
    # (its summary lines count them), every other script 0
    differs = cmd[1].endswith("compare_isolation.py") and re.search(
        r", [1-9]\d* differ,", (H200 / name).read_text())
    assert proc.returncode == (1 if differs else 0), proc.stderr
    assert (H200 / name).read_text() == proc.stdout, \
        f"reports/h200/{name} is stale: run bash reports/h200/regenerate.sh"


def test_kept_reports_are_declared_and_have_no_records_here():
    """Issue 26's reports came back without their records (the call's $OUT held 9 files, 8
    come back): regenerate.sh declares each one `kept`, none of their run ids has a records
    file in results/, and the archive's README says they cannot be regenerated."""
    kept = _kept()
    assert sorted(kept) == sorted(f"shapes/{p.name}" for p in SHAPES.glob("*.md")
                                  if p.name != "README.md")
    assert len(kept) == 6
    for name in kept:
        ids = set(re.findall(r"`(\d{8}-\d{6}-[0-9a-f]{4})`", (H200 / name).read_text()))
        assert len(ids) == 1, name
        assert not [p for i in ids for p in RESULTS.glob(f"{i}*")], name
    assert "cannot be regenerated" in (SHAPES / "README.md").read_text()


def _load_row(md: str, spec: str, patches: str, residue: int) -> str:
    """The Load table's row of one cell of b_load.md."""
    (row,) = [ln for ln in md.splitlines() if ln.startswith(f"| `SPEC={spec} ")
              and f"patches={patches} " in ln and re.search(rf"\|\s+{residue}\s+\| cold", ln)]
    return row


def test_issue26_claims_hold_in_the_reports():
    """reports/h200/README.md's issue-26 section, read off the reports themselves (no
    records came back): (a) residue 4 broken cold for ngram and MTP, 3 and 5 clean, the fix
    clean; (b) all 12 load cells ok, MTP 484's final chunk was 4 tokens beside 4 decode rows
    (20 tokens), no ngram cell scheduled a 4-token chunk; (c) every pool failed to boot."""
    a = (SHAPES / "a_budget.md").read_text()
    for spec in ("ngram", "mtp"):
        assert f"`SPEC={spec} CTX=huge k=3 FULL_AND_PIECEWISE no-prefix-cache patches=none " \
               "hybrid budget=512`: 2 clean, 1 broken: residue 4." in a
    (r4,) = [ln for ln in a.splitlines() if ln.startswith("| **residue 4**")]
    assert "**13/13, `stop`, 1.00 tok/step**" in r4 and "**13/13, `stop`, 2.00 tok/step**" in r4
    for r in (3, 5):
        (row,) = [ln for ln in a.splitlines() if ln.startswith(f"| residue {r} ")]
        assert row.count("276/276") == 2
    assert a.count("0 / 1028, final chunk 4") == 2
    p = (SHAPES / "a_budget_patched.md").read_text()
    assert "2 phase cells: all ok" in p and p.count("prefill-discriminator: applied") >= 2
    b = (SHAPES / "b_load.md").read_text()
    assert "12 data points, 12 phase cells: all ok" in b
    for patches in ("none", "all"):
        assert "chunk 4 beside 4 decode, 0 prefill (20 tokens" in _load_row(b, "mtp", patches, 484)
        for r in (4, 100, 484):
            assert "chunk 4 beside" not in _load_row(b, "ngram", patches, r)
            assert "| ok " in _load_row(b, "ngram", patches, r)
    for pool in (24, 36, 54):
        c = (SHAPES / f"c_preempt_{pool}.md").read_text()
        assert "0 clean, 2 boot-fail: residues 4, 484." in c
        assert "Engine core initialization failed" in c
        assert f"--num-gpu-blocks-override={pool}" in c


@pytest.mark.slow
@pytest.mark.parametrize("name,files", _report_lines(), ids=lambda v: v if isinstance(v, str) else "")
def test_committed_report_is_what_the_records_render(name, files):
    paths = [RESULTS / f for f in files]
    manifests = [m for m in (load_manifest_for(p) for p in paths) if m]
    assert len(manifests) == len(paths)
    explained = [(m, read_jsonl(p)) for m, p in linked_runs(paths, "explains")]  # as the CLI
    md = render_markdown(load_records(paths), manifests, explained=explained)
    assert (H200 / name).read_text().rstrip("\n") == md.rstrip("\n"), \
        f"reports/h200/{name} is stale: run bash reports/h200/regenerate.sh"


def _summarize():
    """reports/h200/summarize.py as a module (it is a script beside the reports)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("h200_summarize", H200 / "summarize.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bad_residues() -> dict[tuple, set]:
    """(model, spec, k, isolation, seed, cudagraph, patches) -> residues with a bad cell,
    over every archived hybrid/dense record."""
    flag = _summarize().flag
    out: dict[tuple, set] = defaultdict(set)
    for path in _phase3_paths():
        cmd = load_manifest_for(path)["command"]
        model = "dense" if flag(cmd, "--model").endswith("dense") else "hybrid"
        for r in read_jsonl(path):
            cfg = r["config"]
            key = (model, cfg["spec"], cfg["draft_tokens"], r["isolation"],
                   flag(cmd, "--seed", "0"), cfg["cudagraph_mode"], r["patches"])
            out[key]
            if r["verdict"] != "ok":
                out[key].add(r["residue"])
    return out


def test_the_h200_claims_hold_in_the_records():
    bad = _bad_residues()
    hyb = {k: v for k, v in bad.items()
           if k[0] == "hybrid" and k[1] == "ngram" and k[2] == 3}
    seeds = {k[4] for k in hyb}
    assert seeds == {"0", "1", "2"}
    for (_, _, _, isolation, seed, mode, patches), residues in hyb.items():
        if mode == "FULL_AND_PIECEWISE" and patches == "none":
            assert residues == {4}, (isolation, seed)    # exactly k + 1, reset and fresh
        else:
            assert residues == set(), (isolation, seed, mode, patches)
    for iso in ("reset", "fresh"):
        assert all(("hybrid", "ngram", 3, iso, s, "FULL_AND_PIECEWISE", "none") in hyb
                   for s in seeds)
    controls = {k: v for k, v in bad.items() if k not in hyb}
    assert {(k[0], k[1], k[2]) for k in controls} == {
        ("dense", "ngram", 3), ("hybrid", "none", 0), ("hybrid", "ngram", 4)}
    assert all(not v for v in controls.values())       # every control clean


def test_residue_4_breaks_cold_as_well_as_on_a_hit_and_the_plugin_reported_itself():
    for path in _phase3_paths():
        for r in read_jsonl(path):
            want = "applied" if r["patches"] == "all" else "off"
            assert set(r["patch_status"].values()) == {want}
            if r["verdict"] != "ok":
                cold = r["phase"] == "cold"
                assert r["cached_tokens"] == (0 if cold else 1152)
                assert r["target_len"] == 1156 and r["computed_tail"] == (1156 if cold else 4)


def _issue18() -> dict[str, list[dict]]:
    """Issue 18's records by name: spec, k, isolation."""
    out: dict[str, list[dict]] = defaultdict(list)
    for path in sorted(p for run in ISSUE18 for p in RESULTS.glob(f"{run}*.jsonl.gz")):
        for r in read_jsonl(path):
            c = r["config"]
            out[f"{c['spec']} k={c['draft_tokens']} {r['isolation']}"].append(r)
    return out


def _bad(recs, mode="FULL_AND_PIECEWISE", patches="none") -> set[tuple]:
    return {(r["residue"], r["phase"], r["cached_tokens"], r["computed_tail"]) for r in recs
            if r["verdict"] != "ok" and r["config"]["cudagraph_mode"] == mode
            and r["patches"] == patches}


def test_issue18_mtp_claims_hold_in_the_records():
    """README: MTP k = 3 breaks residue 4 only, unpatched FULL, cold (0 / 1,156) and on the
    self-hit (768 / 388, the dropped block), reset and fresh; k = 1 breaks residue 2 on a
    fresh server's cold request only; every other cell is ok, at 4.0 / 2.0 tok/step."""
    runs = _issue18()
    k3 = {(4, "cold", 0, 1156), (4, "self-hit", 768, 388)}
    for iso in ("reset", "fresh"):
        recs = runs[f"mtp k=3 {iso}"]
        assert _bad(recs) == k3, iso
        assert all(r["verdict"] == "ok" for r in recs
                   if (r["config"]["cudagraph_mode"], r["patches"]) != ("FULL_AND_PIECEWISE", "none"))
        assert {r["tok_per_step"] for r in recs if r["verdict"] == "ok"} == {4.0}
    assert all(r["verdict"] == "ok" for r in runs["mtp k=1 reset"])
    assert _bad(runs["mtp k=1 fresh"]) == {(2, "cold", 0, 1154)}
    assert {r["tok_per_step"] for r in runs["mtp k=1 reset"]} == {2.0}
    for recs in runs.values():
        for r in recs:
            if r["verdict"] != "boot-fail":
                want = "applied" if r["patches"] == "all" else "off"
                assert set(r["patch_status"].values()) == {want}


def test_issue18_dflash_never_booted_and_ngram_k4_breaks_on_a_fresh_server():
    runs = _issue18()
    dflash = runs["dflash2 k=7 reset"]
    assert len(dflash) == 1024 and {r["verdict"] for r in dflash} == {"boot-fail"}
    assert _bad(runs["ngram k=4 fresh"]) == {(5, "cold", 0, 1157), (5, "self-hit", 1152, 5)}
    log = H200 / "logs" / "issue18_reset_dflash_bootfail_45a04ae7cfa0-r000-gpu0-60377.log.gz"
    assert "All drafting layers should belong to the same kv cache group" in \
        gzip.open(log, "rt").read()
