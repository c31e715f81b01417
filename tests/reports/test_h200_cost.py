"""Issue 35's cost curve on one H200 (reports/h200/cost/): the claims its README, the
project README, benchmarks/README.md and docs/scale.md make, checked against the archived
records. Each number the docs quote is computed here from the records and looked up in the
doc that quotes it, so a doc that drifts from the records fails. Dummy weights: cost only,
no verdicts."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks import cost_table  # noqa: E402
from benchmarks.cost_table import NOTE  # noqa: E402

HERE = ROOT / "reports" / "h200" / "cost"
RECORDS, MANIFEST = HERE / "records.jsonl.gz", HERE / "manifest.json"
MEASURED = ("2b@4.9", "2b@20", "27b@20")
DOCS = {name: (ROOT / name).read_text() for name in (
    "reports/h200/cost/README.md", "README.md", "benchmarks/README.md", "docs/scale.md")}


@pytest.fixture(scope="module")
def run():
    recs, manifest = cost_table.load_files(RECORDS, MANIFEST)
    return recs, manifest, cost_table.summarize(recs)


def _med(rows, name, key):
    return rows[name][key][0]


def test_every_record_is_marked_cost_only_and_the_run_ran_to_its_end(run):
    recs, manifest, _ = run
    assert recs and all(r["cost_only"] is True and r["note"] == NOTE for r in recs)
    assert manifest["note"] == NOTE and manifest["deadline_s"] == 512.0
    assert manifest["stop_reason"] is None and round(manifest["wall_s"]) == 474
    assert manifest["fill_call"]["args"] == ["state,kv", "A"]


def test_twenty_points_and_twenty_proven_fills_per_server_few_sleeps(run):
    _, _, rows = run
    for name in MEASURED:
        assert rows[name]["point"][3] == 20 and rows[name]["fill"][3] == 20
        assert rows[name]["fill_proven"] == "20/20"
    assert [rows[n]["sleep"][3] for n in MEASURED] == [4, 4, 3]
    assert [len(rows[n]["skips"]) for n in MEASURED] == [16, 16, 17]
    assert all(s["what"] == "sleep" for n in MEASURED for s in rows[n]["skips"])
    assert not any(rows[n]["errors"] for n in rows)


def test_the_goal_was_not_met_by_either_restore(run):
    """Fill 13.5-37.5% of a point (0.08-0.28 s), sleep 54-162%: never <= 1%."""
    _, _, rows = run
    fill_pct = [100 * _med(rows, n, "fill") / _med(rows, n, "point") for n in MEASURED]
    sleep_pct = [100 * _med(rows, n, "sleep") / _med(rows, n, "point") for n in MEASURED]
    assert f"{min(fill_pct):.1f}" == "13.5" and f"{max(fill_pct):.1f}" == "37.5"
    assert round(min(sleep_pct)) == 54 and round(max(sleep_pct)) == 162
    fills = [_med(rows, n, "fill") for n in MEASURED]
    assert f"{min(fills):.2f}" == "0.08" and f"{max(fills):.2f}" == "0.28"
    page = (HERE / "cost_curve.md").read_text()
    assert page.count("(not met)") == 6 and "(met)" not in page
    for doc in DOCS.values():
        assert "not met" in doc.lower() and "13.5–37.5%" in doc and "54–162%" in doc


def test_at_27b_the_fill_is_8_5_times_cheaper_than_the_sleep_cycle(run):
    """Medians 0.276 s vs 2.36 s; only 3 sleep cycles, the first 61 s (its sleep step 59.6 s)."""
    recs, _, rows = run
    fill, sleep = _med(rows, "27b@20", "fill"), _med(rows, "27b@20", "sleep")
    assert f"{fill:.3f}" == "0.276" and f"{sleep:.2f}" == "2.36"
    assert f"{sleep / fill:.1f}" == "8.5"
    cycles = [r for r in recs if r["kind"] == "sleep" and r["server"] == "27b@20"]
    assert [round(r["s"]) for r in cycles] == [61, 2, 2] and cycles[0]["round"] == 1
    assert round(cycles[0]["steps"]["sleep"], 1) == 59.6
    assert {r["allocator"]["backup"] for r in cycles} == {45.57}
    for name in ("reports/h200/cost/README.md", "benchmarks/README.md", "docs/scale.md"):
        assert "0.276 s" in DOCS[name] and "2.36 s" in DOCS[name] and "8.5" in DOCS[name], name


def test_the_fill_moves_per_layer_views_that_exceed_the_pool_and_follow_it(run):
    """2b@4.9 fills 17.5 GiB of views on a 4.9 GiB pool; 2b@20 and 27b@20 fill about the same
    (71.4 / 73.3 GiB: the pool, not the model); 4.9 / 20 of the pool is 0.245 of the bytes."""
    _, _, rows = run
    gib = {n: _med(rows, n, "fill_gib") for n in MEASURED}
    assert gib["2b@4.9"] > 3 * 4.9 and f"{gib['2b@4.9']:.1f}" == "17.5"
    assert f"{gib['2b@20']:.1f}" == "71.4" and f"{gib['27b@20']:.1f}" == "73.3"
    assert f"{gib['2b@4.9'] / gib['2b@20']:.3f}" == "0.245"
    assert "17.5 GiB" in DOCS["reports/h200/cost/README.md"]


def test_the_one_configuration_sweep_from_the_medians(run):
    """27B: 519 s by fill, 785 s by sleep, 38,178 s fresh (boot 297 s)."""
    _, _, rows = run
    r = rows["27b@20"]
    boot, point = r["boot"]["boot_s"], r["point"][0]
    assert round(boot + 128 * (point + r["fill"][0])) == 519
    assert round(boot + 128 * (point + r["sleep"][0])) == 785
    assert round(128 * (boot + point)) == 38178
    for name in ("reports/h200/cost/README.md", "benchmarks/README.md", "docs/scale.md"):
        assert "519 s" in DOCS[name] and "785 s" in DOCS[name] and "38,178 s" in DOCS[name], name


def test_boots_were_cold_and_together_243_to_297_s(run):
    recs, _, rows = run
    boots = [r for r in recs if r["kind"] == "boot"]
    assert len(boots) == 4 and {b["compile_cache"] for b in boots} == {"miss"}
    assert {b["error"] for b in boots} == {None}
    assert round(min(b["boot_s"] for b in boots)) == 243
    assert round(max(b["boot_s"] for b in boots)) == 297
    assert rows["2b@4.9:prefork"]["boot"]["how"] == "forked"
    for doc in DOCS.values():
        assert "243–297 s" in doc and "one H200" in doc


def test_the_point_medians_and_ranges_the_readmes_quote(run):
    _, _, rows = run
    p = rows["27b@20"]["point"]
    quoted = f"{p[0]:.2f} s ({p[1]:.2f}–{p[2]:.2f})"
    assert quoted == "1.46 s (1.15–1.67)"
    for name in ("README.md", "benchmarks/README.md"):
        assert quoted in DOCS[name], name


def test_every_page_says_dummy_weights_cost_only():
    for name, doc in {**DOCS, "cost_curve.md": (HERE / "cost_curve.md").read_text()}.items():
        assert "cost only, no verdicts" in doc.lower().replace("**", ""), name


def test_the_24_gb_table_is_marked_a_projection_and_keeps_its_sources():
    scale = DOCS["docs/scale.md"]
    table = scale[scale.index("### Projection table"):scale.index("### Sources")]
    assert "**Projection, not a measurement.**" in table and "_from `cost_curve.md`_" not in table
    assert "297" in table and "0.276" in table and "2.36" in table
    assert "https://" in scale[scale.index("### Sources"):]


def test_the_cost_table_script_prints_gzipped_records_and_refuses_a_missing_file(tmp_path):
    env_cmd = [sys.executable, str(ROOT / "benchmarks" / "cost_table.py")]
    ok = subprocess.run([*env_cmd, str(RECORDS), "--manifest", str(MANIFEST)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and ok.stdout == (HERE / "cost_curve.md").read_text()
    bad = subprocess.run([*env_cmd, str(tmp_path / "nope.jsonl.gz")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "no such file" in bad.stderr
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")
    bad = subprocess.run([*env_cmd, str(junk)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
