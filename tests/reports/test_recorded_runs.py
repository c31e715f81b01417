"""Reports from runs recorded by the real harness (``sweep`` end to end).

- ``fixtures/cmd/``: the harness against the fake test engine (``--engine cmd``,
  ``--break-residue 4``): real records, real manifest, every key the sweep writes.
- ``fixtures/lab/``: the lab engine sweeps kept by ``reports/regenerate.sh``; the
  committed ``reports/<name>.md`` must be exactly what the fixture renders to.
"""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from .conftest import FIXTURES
from .gfm import gfm_html, gfm_tables
from harness.publish.compare import compare_records
from harness.publish.gate import gate_exit_code, write_junit
from harness.report import render_markdown
from harness.records.store import load_manifest_for, load_records

ROOT = Path(__file__).resolve().parents[2]
LAB = FIXTURES / "lab"


def _load(tmp_path: Path, stem: Path):
    """Copy (and gunzip) a kept run into tmp_path; records + manifests via harness.records.store."""
    src = stem.with_name(stem.name + ".jsonl")
    dst = tmp_path / src.name
    if src.exists():
        shutil.copy(src, dst)
    else:
        with gzip.open(stem.with_name(stem.name + ".jsonl.gz"), "rb") as fh:
            dst.write_bytes(fh.read())
    man = stem.with_name(stem.name + ".manifest.json")
    if man.exists():
        shutil.copy(man, tmp_path / man.name)
    m = load_manifest_for(dst)
    return load_records([dst]), [m] if m else []


def _lab(tmp_path, name):
    if not (LAB / f"{name}.jsonl.gz").exists():
        pytest.skip(f"no lab fixture {name} (run reports/regenerate.sh)")
    return _load(tmp_path, LAB / name)


def test_fake_engine_run_renders(tmp_path):
    records, manifests = _load(tmp_path, FIXTURES / "cmd" / "fake-break4")
    md = render_markdown(records, manifests)
    t = gfm_tables(md)[0]
    assert t["head"][1:] == ["cold", "warm", "self-hit"]
    row4 = [r for r in t["rows"] if r[0] == "residue 4"][0]
    assert row4[1] == "276/276" and row4[2].startswith("empty, stop") and row4[3].startswith("empty")
    assert "<strong>residue 4</strong>" in gfm_html(md)
    assert "10 of 128 residues sampled: a single broken residue would be missed 92% of the time." in md
    assert "`content: null`" in md  # the collapse came back as content: null
    assert "--residues 4 " in md  # its rerun line
    assert "max\\_model\\_len: requested 245760" in md  # the effective config differs
    assert gate_exit_code(records) == 1 and gate_exit_code(records, records) == 0
    path = write_junit(records, tmp_path / "j.xml")
    junitparser = pytest.importorskip("junitparser")
    cases = [c for s in junitparser.JUnitXml.fromfile(str(path)) for c in s]
    assert len(cases) == 30 and sum(1 for c in cases if c.result) == 2


def test_lab_full_vs_piecewise(tmp_path):
    records, manifests = _lab(tmp_path, "fvp")
    md = render_markdown(records, manifests)
    tables = gfm_tables(md)
    main = tables[0]
    assert [r[0] for r in main["rows"]] == ["residue 3", "residue 4", "residue 5"]
    head = main["head"]
    full_hit = head.index("FULL_AND_PIECEWISE self-hit")
    pw_hit = head.index("PIECEWISE self-hit")
    r3, r4, r5 = main["rows"]
    assert r4[full_hit].startswith(("empty", "1 char")) or "tok/step" in r4[full_hit]
    for row in (r3, r5):
        assert all("/" in c and c.split("/")[0] == c.split("/")[1].split()[0]
                   for c in row[1:]), row
    assert r4[pw_hit].split("/")[0] == r4[pw_hit].split("/")[1]
    thread = tables[1]
    assert thread["head"][1:] == ["residue 3", "residue 4", "residue 5"]


def test_lab_128_summary(tmp_path):
    records, manifests = _lab(tmp_path, "full128")
    md = render_markdown(records, manifests)
    t = gfm_tables(md)[0]
    assert t["rows"][0][0] == "residues 0–3, 5–127"
    assert t["rows"][1][0] == "residue 4"
    assert "127 clean, 1 broken: residue 4" in md
    assert "**the sweep agrees**: broken exactly at residue 4" in md
    assert "sampled:" not in md


def test_lab_fixed_compare(tmp_path):
    old, _ = _lab(tmp_path, "full128")
    new, _ = _lab(tmp_path, "fixed128")
    res = compare_records(old, new).as_dict()
    fixed = [p["residue"] for c in res["configs"] for p in c["points"] if p["status"] == "fixed"]
    # the configurations differ only in the patch set: matched as before / after the fix
    assert [c["matched_by"] for c in res["configs"]] == ["configuration except patches"]
    assert not res["regressions"] and fixed == [4]
    assert res["summary"]["unchanged_ok"] == 127
    assert gate_exit_code(new) == 0 and gate_exit_code(new, old) == 0
    assert gate_exit_code(old, new) == 1  # the unpatched build regresses against the fixed one


def test_lab_ladder(tmp_path):
    records, manifests = _lab(tmp_path, "ladder")
    md = render_markdown(records, manifests)
    assert "## Ladder: block × unit" in md
    ladder = [t for t in gfm_tables(md) if t["head"][:2] == ["block", "unit"]][0]
    outcome = {(r[0], r[1]): r[3] for r in ladder["rows"]}
    assert outcome[("16", "none")] == "clean"
    assert outcome[("128", "none")] == "clean"
    assert outcome[("128", "128")].startswith("broken at residue")


@pytest.mark.parametrize("name", ["fvp", "full128", "fixed128", "ladder"])
def test_committed_report_is_what_the_fixture_renders(tmp_path, name):
    records, manifests = _lab(tmp_path, name)
    committed = ROOT / "reports" / f"{name}.md"
    assert committed.exists(), f"reports/{name}.md missing: run reports/regenerate.sh"
    assert committed.read_text(encoding="utf-8") == render_markdown(records, manifests), \
        f"reports/{name}.md is stale: run ONLY={name} reports/regenerate.sh"
