"""The claims reports/h200/README.md ("Second device session") makes about the DFlash and
ngram k = 1..5 `--isolation auto` runs and the boot benchmark, checked against the
committed records, manifests and benchmark JSON."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from harness.report.auto import agreement_of
from harness.records.phase_record import typed
from harness.records.store import read_jsonl

H200 = Path(__file__).resolve().parents[2] / "reports" / "h200"
DFLASH, UNPATCHED, PATCHED = ("20261201-115154-d70a", "20261201-115154-d292",
                              "20261201-115154-d238")


def load(run: str) -> tuple[list[dict], dict]:
    return (read_jsonl(H200 / "results" / f"{run}.jsonl.gz"),
            json.loads((H200 / "results" / f"{run}.manifest.json").read_text()))


def bad(recs: list[dict]) -> set[tuple]:
    return {(r["config"]["draft_tokens"], r["isolation"], r["document_seed"], r["residue"],
             r["phase"], r["verdict"]) for r in recs if r["verdict"] != "ok"}


def test_dflash_breaks_k_plus_1_only_unpatched_full_with_the_dropped_block():
    recs, man = load(DFLASH)
    assert {r["config"]["method"] for r in recs} == {"dflash"}
    assert man["exit_code"] == 130                      # stopped by its time limit
    for c in man["configs"]:                            # every residue swept on reset
        got = {r["residue"] for r in recs if r["config_id"] == c["config_id"]
               and r["isolation"] == "reset" and r["document_seed"] == 0}
        assert got == set(range(128)), c["config_id"]
    assert bad(recs) == {(7, "fresh", 0, 8, "cold", "diverged"),
                         (7, "reset", 1, 8, "cold", "diverged"),
                         (7, "reset", 1, 8, "self-hit", "diverged"),
                         (7, "fresh", 1, 8, "cold", "broken"),
                         (7, "fresh", 1, 8, "self-hit", "diverged")}
    worse = [r for r in recs if r["verdict"] != "ok"]
    assert {(r["config"]["cudagraph_mode"], r["patches"]) for r in worse} == {
        ("FULL_AND_PIECEWISE", "none")}
    assert {(r["phase"], r["cached_tokens"], r["computed_tail"]) for r in worse} == {
        ("cold", 0, 1160), ("self-hit", 768, 392)}
    tps = [r["tok_per_step"] for r in recs if r["verdict"] == "ok" and r.get("tok_per_step")]
    assert statistics.median(tps) >= 2.0 and round(statistics.median(tps), 2) == 7.86
    a = agreement_of(typed(recs))   # the report reads PhaseRecords
    assert (a.both, a.agree) == (34, 33) and not a.only_reset
    assert {(r.document_seed, r.residue, r.phase) for r in a.only_fresh} == {
        (0, 8, "cold")}


def test_ngram_k1_k5_reset_missed_k5_document0_and_nothing_else_broke():
    recs, man = load(UNPATCHED)
    assert man["documents"] == [0, 1]
    assert {(k, res) for k, _, _, res, _, _ in bad(recs)} == {(1, 2), (5, 6)}
    a = agreement_of(typed(recs))   # the report reads PhaseRecords
    assert {(r.config["draft_tokens"], r.document_seed, r.residue, r.phase)
            for r in a.only_fresh} == {(5, 0, 6, "cold"), (5, 0, 6, "self-hit")}
    assert not a.only_reset


@pytest.mark.slow
def test_patched_ngram_k1_to_k5_all_ok_where_measured():
    recs, man = load(PATCHED)
    assert {r["config"]["draft_tokens"] for r in recs} == {1, 2, 3, 4, 5}
    assert {r["verdict"] for r in recs} == {"ok"}
    assert {r["patch_status"]["prefill-discriminator"] for r in recs} == {"applied"}
    fresh = {(r["config"]["draft_tokens"], r["residue"]) for r in recs
             if r["isolation"] == "fresh"}
    assert len(fresh) == 1                  # the rest of the confirmations did not run


def test_forked_boots_are_faster_and_byte_identical_but_the_engine_core_still_spawns():
    data = json.loads((H200 / "boot" / "gpu_boot-call5.json").read_text())
    rows = {r["variant"]: r for r in data["summary"]}
    assert rows["both"]["forked"] == rows["both"]["boots"] == 2
    assert rows["both"]["boot_s"] < 0.7 * rows["caches"]["boot_s"]
    assert all(rows[v]["identical_to_plain"] == "6/6" for v in ("caches", "both", "forkcore"))
    assert all(rows[v]["first_cell_ok"] == 0 for v in rows)    # residue 4 broke every time
    assert set(data["fork_server"]["optional_skipped_cuda"]) == {
        "vllm.model_executor.models.qwen3_5",
        "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn"}
    forked = [b for b in data["boots"] if b["how"] == "forked"]
    assert forked and all(b["split"]["engine_core_spawn_forced"] for b in forked)
    assert all(b["survivors"] == [] for b in data["boots"])
