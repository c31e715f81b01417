"""Issue 51's first GPU run (reports/h200/cost-restore/, one H200): the claims its README,
the project README and docs/scale.md make, computed from the archived records and looked up
in the docs that quote them, so a doc that drifts from the records fails. Dummy weights:
cost only, no verdicts."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks import cost_table  # noqa: E402
from benchmarks.cost_table import NOTE  # noqa: E402

HERE = ROOT / "reports" / "h200" / "cost-restore"
RECORDS, MANIFEST = HERE / "records.jsonl.gz", HERE / "manifest.json"
PAGE = (HERE / "README.md").read_text()
DOCS = {name: (ROOT / name).read_text() for name in ("README.md", "docs/scale.md")}


@pytest.fixture(scope="module")
def run():
    recs, manifest = cost_table.load_files(RECORDS, MANIFEST)
    rows = cost_table.summarize(recs)
    return recs, manifest, rows, cost_table._pool_row(recs, "27b@20", rows["27b@20"]["point"][0])


def _bench() -> dict[str, list[str]]:
    rows = [ln.split("|")[1:-1] for ln in (HERE / "fill_bench.md").read_text().splitlines()
            if ln.startswith("| ") and not ln.startswith("| what")]
    return {r[0].strip(): [c.strip() for c in r[1:]] for r in rows}


def test_one_h200_one_server_every_round_ran(run):
    recs, manifest, rows, pool = run
    assert recs and all(r["cost_only"] is True and r["note"] == NOTE for r in recs)
    assert manifest["stop_reason"] is None and round(manifest["wall_s"]) == 280
    assert manifest["argv"][-5:] == ["--servers", "27b@20", "--no-sleep", "--gpu-gib", "79"]
    assert list(rows) == ["27b@20"] and pool["device"] == "NVIDIA H200"
    assert rows["27b@20"]["point"][3] == 20 and pool["ran"] == {"dirty": 21}
    assert "one NVIDIA H200" in PAGE and "470 --servers 27b@20 --no-sleep --gpu-gib 79" in PAGE


def test_the_limit_and_what_it_is_of_the_point(run):
    _, _, rows, pool = run
    point = rows["27b@20"]["point"]
    assert f"{pool['pool'] / 2**30:.2f}" == "19.96" and f"{point[0]:.2f}" == "1.24"
    assert f"{point[1]:.2f}–{point[2]:.2f}" == "1.03–1.34"
    bench = _bench()
    limit_ms = [pool["limit"] * 1e3, float(bench["copy bandwidth limit (write + read of the pool)"][0])]
    assert f"{min(limit_ms):.1f}–{max(limit_ms):.1f} ms" == "10.1–10.2 ms"
    assert f"{pool['bw'] / 1e9:,.0f}" == "4,185" and "copy bandwidth 4243 GB/s" in (
        HERE / "fill_bench.md").read_text()
    pct = f"{100 * pool['limit'] / point[0]:.2f}%"
    assert pct == "0.83%"
    for doc in (PAGE, *DOCS.values()):
        assert "4,185" in doc and "4,243 GB/s" in doc and "10.1–10.2 ms" in doc
        assert pct in doc and "H200" in doc


def test_neither_target_was_met(run):
    _, _, rows, pool = run
    whole = pool["whole"]
    assert f"{whole[0] * 1e3:.1f}" == "39.3" and f"{whole[0] / pool['limit']:.2f}" == "3.83"
    assert f"{whole[1] * 1e3:.1f}–{whole[2] * 1e3:.1f}" == "38.8–39.7"
    fill = _bench()["once-per-storage fill + proof"]
    assert fill[0].startswith("37.195")
    assert fill[3] == "3.68"
    dirty, worker = pool["dirty"], pool["dirty_worker"]
    assert f"{dirty[0] * 1e3:.1f}" == "14.8" and f"{worker[0] * 1e3:.1f}" == "8.2"
    pct = f"{100 * dirty[0] / pool['point']:.2f}%"
    assert pct == "1.20%" and pool["blocks"][0] == 19 and pool["mib"][0] == 1064
    page = (HERE / "cost_curve.md").read_text()
    assert page.count("(not met: ≤ 1%") == 1 and page.count("(not met: ≤ 2×)") == 1
    for doc in (PAGE, *DOCS.values()):
        assert "3.83×" in doc and "1.20%" in doc and "39.3 ms" in doc and "14.8 ms" in doc
    assert PAGE.count("**NOT met**") == 2


def test_both_audits_failed_on_every_storage_and_the_restores_own_proofs_held(run):
    """The finding the README explains (a page copied into a block no table names)."""
    recs, _, _, pool = run
    assert pool["audits"] == (0, 2) and pool["proven"] == (40, 41)
    dirty = [r for r in recs if r["kind"] == "dirty_restore"]
    assert all(r["result"]["regions"]["pool"]["mismatched_bytes"] == 0 for r in dirty)
    (unproven,) = [r for r in dirty if not r["proven"]]
    assert unproven["round"] == 16 and not unproven["result"]["audit"]["ok"]
    audits = [unproven["result"]["audit"], next(r["result"] for r in recs if r["kind"] == "audit")]
    assert all(a["bad_storages"] == list(range(16)) and a["repaired_by"]["ok"] for a in audits)
    hits = {p["phases"]["self-hit"]["cached_tokens"] for p in recs if p["kind"] == "point"}
    # every hit ends on a 128-token unit past the 896-token block: a partial tail
    assert 1152 in hits and all(h % 128 == 0 and h % 896 for h in hits)
    assert "0 of 2 ok" in PAGE and "40 of 41" in PAGE and "kv_cache_block_copies" in PAGE


def test_the_as_returned_table_differs_only_in_the_two_added_lines():
    got = (HERE / "cost_curve.md").read_text().splitlines()
    kept = (HERE / "device" / "cost_curve-as-returned.md").read_text().splitlines()
    diff = [(a, b) for a, b in zip(kept, got) if a != b]
    assert len(got) == len(kept) and len(diff) == 2
    assert all(b.startswith(a.rstrip(")")) or "Proven:" in b for a, b in diff)
    raw = [json.loads(x) for x in gzip.open(RECORDS)]
    assert len(raw) == 89


def test_two_runs_make_one_page_with_each_gpu_named(capsys):
    """How a second run (another GPU) goes beside this one: cost_table.py with both."""
    other = ROOT / "reports" / "h200" / "cost"
    args = [str(RECORDS), str(other / "records.jsonl.gz"),
            "--manifest", str(MANIFEST), "--manifest", str(other / "manifest.json")]
    assert cost_table.main(args) == 0
    page = capsys.readouterr().out
    assert "| 27b@20 (NVIDIA H200) | NVIDIA H200 | 20 | 4,185 |" in page
    assert "| 27b@20 (cost) |" in page and page.count("Wall ") == 2
    assert cost_table.main([str(RECORDS), "--manifest", str(MANIFEST),
                            "--manifest", str(MANIFEST)]) == 2
    assert "more --manifest" in capsys.readouterr().err
