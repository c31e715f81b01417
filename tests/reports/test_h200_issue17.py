"""The claims reports/h200/README.md makes about issue 17's archived `--isolation auto`
runs, checked against the committed records and manifests."""
from __future__ import annotations

import json
from pathlib import Path

from harness.report.auto import agreement_of
from harness.records.phase_record import typed
from harness.records.store import read_jsonl

RES = Path(__file__).resolve().parents[2] / "reports" / "h200" / "results"
MATRIX, KRUN = "20261201-095803-fa07", "20261201-100602-f154"


def load(run: str) -> tuple[list[dict], dict]:
    return (read_jsonl(RES / f"{run}.jsonl.gz"),
            json.loads((RES / f"{run}.manifest.json").read_text()))


def bad(recs: list[dict]) -> set[tuple]:
    return {(r["config"]["draft_tokens"], r["isolation"], r["document_seed"], r["residue"],
             r["phase"]) for r in recs if r["verdict"] != "ok"}


def test_matrix_in_one_call_with_every_rule_residue_confirmed_fresh():
    recs, man = load(MATRIX)
    assert man["isolation"] == "auto" and man["wall_s"] < 600 and man["exit_code"] == 1
    assert len(man["configs"]) == 4 and len(recs) == 1112
    assert man["timing"]["passes"]["fresh"]["points"] == 32
    assert man["timing"]["boot_split"]["launchers"] == {"plain": 36}
    fresh = {(r["config_id"], r["document_seed"], r["residue"]) for r in recs
             if r["isolation"] == "fresh" and r["confirms"] == "rule neighbourhood"}
    assert fresh == {(c["config_id"], d, res) for c in man["configs"] for d in (0, 1)
                     for res in (3, 4, 5)}
    assert bad(recs) == {(3, iso, d, 4, ph) for iso in ("reset", "fresh") for d in (0, 1)
                         for ph in ("cold", "self-hit")}
    assert {r["patches"] for r in recs if r["verdict"] != "ok"} == {"none"}
    a = agreement_of(typed(recs))   # the report reads PhaseRecords
    assert (a.both, a.agree, len(a.only_fresh), len(a.only_reset)) == (64, 64, 0, 0)


def test_k4_document0_broken_only_on_a_fresh_server():
    recs, man = load(KRUN)
    assert man["documents"] == [0, 1]
    a = agreement_of(typed(recs))   # the report reads PhaseRecords
    assert (a.both, a.agree) == (32, 30)
    assert {(r.config["draft_tokens"], r.document_seed, r.residue, r.phase)
            for r in a.only_fresh} == {(4, 0, 5, "cold"), (4, 0, 5, "self-hit")}
    assert not a.only_reset
    assert (4, "reset", 1, 5, "cold") in bad(recs) and (2, "reset", 0, 3, "cold") in bad(recs)
