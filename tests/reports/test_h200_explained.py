"""The real vLLM 0.26.0 Bug B cells (reports/h200/results, residue 4) explained: each bad
cell's first divergence recovered from the run's own clean answers, margin unknown (the
archive has no logprobs), and the final-chunk line read from cached / tail."""
from __future__ import annotations

from pathlib import Path

from harness.report import render_markdown
from harness.report.divergence import divergence_of, reference_texts
from harness.records.phase_record import PhaseRecord, typed
from harness.records.store import read_jsonl
from harness.judge.verdict import judge

RESULTS = Path(__file__).resolve().parents[2] / "reports" / "h200" / "results"
FRAGMENT = RESULTS / "20261130-024956-23ee.jsonl.gz"   # ' first frost.' cold, 292 wrong on the hit


def test_residue_4_cells_have_their_first_divergence():
    recs = read_jsonl(FRAGMENT)   # as read, to look at raw keys; the report reads them typed
    texts = reference_texts(typed(recs))
    bad = [r for r in recs if r["verdict"] != "ok"]
    assert {(r["residue"], r["phase"]) for r in bad} == {(4, "cold"), (4, "self-hit")}
    for r in bad:
        fd = divergence_of(PhaseRecord.from_dict(r), texts)
        ref = texts[r["reference_sha1"]]
        assert fd["char"] is not None and r["answer"][:fd["char"]] == ref[:fd["char"]]
        assert r["answer"][fd["char"]:fd["char"] + 1] != ref[fd["char"]:fd["char"] + 1]
        assert fd["margin"] is None and fd["call"] == "unknown" and fd["token"] is None


def test_the_13_char_fragment_is_broken_today():
    cold = next(r for r in read_jsonl(FRAGMENT) if r["residue"] == 4 and r["phase"] == "cold")
    ref = reference_texts(typed(read_jsonl(FRAGMENT)))[cold["reference_sha1"]]
    assert cold["answer"] == " first frost." and cold["verdict"] == "diverged"  # as recorded
    assert judge(cold["answer"], source=ref, expected=ref, finish_reason="stop").verdict == "broken"


def test_the_report_explains_the_final_chunk_and_the_margin():
    md = render_markdown(read_jsonl(FRAGMENT))
    assert "**Final chunk:** residue 4: cached 1152 of 1156, computed tail 4 = k + 1" in md
    assert "margin unknown (unknown)" in md
    assert "0 decisive, 0 near-tie, 2 of unknown margin" in md


K1_K5 = RESULTS / "20261201-115154-d292.jsonl.gz"   # ngram k = 1, 5 unpatched, with logprobs


def test_no_near_tie_is_called_from_a_corrupted_answers_own_logprobs():
    # issue 23 item 7: k = 5 residue 6 cold ' key.' (5 of 276 chars) read "margin 0.25
    # (near-tie)" from its own logprobs; the clean answers to the same prompt (other
    # phases, passes and configurations of the run) put the reference token 13 nats ahead
    recs = read_jsonl(K1_K5)
    texts = reference_texts(typed(recs))
    bad = [r for r in recs if r["verdict"] in ("broken", "diverged")]
    assert bad
    for r in bad:
        fd = divergence_of(PhaseRecord.from_dict(r), texts)
        assert fd["call"] != "near-tie" or fd["margin_from"] in ("reference", "clean answer")
        if fd["call"] in ("near-tie", "decisive"):
            assert fd["margin_from"] in ("reference", "clean answer"), fd
    key = next(r for r in bad if r["answer"] == " key." and r["residue"] == 6)
    assert key["first_divergence"]["call"] == "near-tie"   # as recorded
    fd = divergence_of(PhaseRecord.from_dict(key), texts)
    assert fd["margin_from"] == "clean answer" and fd["call"] == "decisive" and fd["margin"] > 10
    md = render_markdown(recs)
    assert "10 decisive, 0 near-tie, 0 of unknown margin" in md
