"""The references against a server the harness never saw (tests/servers/misbehaving_engine.py):
no silent ok under --reference cold, collapses against the reference, golden and matrix
references, unproven hits."""
from __future__ import annotations

import pytest

from harness.run.matrix_reference import rejudge
from harness.records.phase_record import PhaseRecord
from tests.harness.test_hostile_server import hostile_sweep

pytestmark = pytest.mark.usefixtures("no_leftovers")


def cells(recs):
    return {(r["residue"], r["phase"]): r for r in recs}


def test_reference_cold_judges_no_cold_cell_ok(tmp_path, tok_dir, cli):
    proc, recs = hostile_sweep(cli, tok_dir, "--residues", "0-3", "--reference", "cold")
    cold = [r for r in recs if r["phase"] == "cold"]
    assert len(cold) == 4 and {r["verdict"] for r in cold} == {"unjudged"}
    assert {r["verdict"] for r in recs if r["phase"] == "self-hit"} == {"ok"}
    report = next((tmp_path / "reports").glob("*.md")).read_text()
    assert "unjudged" in report and "identical in every phase is invisible" in report
    # the cold answers are the reference, not judged; the hits judged against them decide
    # (issue 36: a clean run under --reference cold exited 1)
    assert "the 4 cold cells are the reference (`--reference cold`), not judged" in report
    assert proc.returncode == 0


@pytest.mark.parametrize("how,verdict", [("cut2", "broken"), ("fragment13", "broken"),
                                         ("one-word", "diverged")])
def test_a_hit_against_the_cold_answer(tmp_path, tok_dir, how, verdict, cli):
    _, recs = hostile_sweep(cli, tok_dir, "--residues", "2", "--reference", "cold", "--logprobs", "3",
                  server=("--misbehave", how, "--only-hit"))
    c = cells(recs)
    assert c[(2, "cold")]["verdict"] == "unjudged"
    hit = c[(2, "self-hit")]
    assert hit["verdict"] == verdict, hit["reason"]
    assert hit["reference_chars"] == len(c[(2, "cold")]["answer"])
    fd = hit["first_divergence"]
    if how == "one-word":
        cold = c[(2, "cold")]["answer"]
        assert fd["char"] == len(" ".join(cold.split(" ")[:3])) + 1
        assert fd["got"].startswith("zebra")
        # logprobs from both sides: token, margin, a call and vLLM's rule
        assert fd["token"] == 3 and fd["got_token"] == " zebra"
        assert fd["margin"] == 4.0 and fd["call"] == "decisive" and fd["in_top_k"] is False


@pytest.mark.slow
def test_golden_run_catches_a_corruption_identical_cold_and_hit(tmp_path, tok_dir, cli):
    hostile_sweep(cli, tok_dir, "--residues", "0-3", "--reference", "cold", out="golden")
    gold = next((tmp_path / "golden").glob("*.jsonl"))
    proc, recs = hostile_sweep(cli, tok_dir, "--residues", "0-3", "--reference", f"golden:{gold}",
                     server=("--misbehave", "one-word", "--at-residue", "2"))
    bad = {k for k, r in cells(recs).items() if r["verdict"] != "ok"}
    assert bad == {(2, "cold"), (2, "self-hit")}
    assert {cells(recs)[k]["verdict"] for k in bad} == {"diverged"}
    assert proc.returncode == 1
    # ... which --reference cold cannot see: the hit matches the corrupted cold answer
    _, blind = hostile_sweep(cli, tok_dir, "--residues", "2", "--reference", "cold", out="blind",
                   server=("--misbehave", "one-word", "--at-residue", "2"))
    assert [r["verdict"] for r in blind] == ["unjudged", "ok"]


def test_a_golden_run_with_bad_cells_is_a_usage_error(tmp_path, tok_dir, cli):
    hostile_sweep(cli, tok_dir, "--residues", "1", out="golden", server=("--misbehave", "empty"))
    gold = next((tmp_path / "golden").glob("*.jsonl"))
    proc = cli("--engine", "cmd", "--model", tok_dir, "--server-cmd", "true {port}",
               "--reference", f"golden:{gold}", "--out", tmp_path / "r", timeout=60)
    assert proc.returncode == 2 and "bad cell" in proc.stderr and "Traceback" not in proc.stderr


def test_without_prompt_tokens_details_every_self_hit_is_invalid(tmp_path, tok_dir, cli):
    _, recs = hostile_sweep(cli, tok_dir, "--residues", "0-3", server=("--misbehave", "no-cached"))
    hits = [r for r in recs if r["phase"] == "self-hit"]
    assert len(hits) == 4 and {r["verdict"] for r in hits} == {"invalid"}
    assert all("hit not proven: the server reports no cached tokens" in r["reason"] for r in hits)


def test_reference_consensus_finds_the_odd_residue(tmp_path, tok_dir, cli):
    proc, recs = hostile_sweep(cli, tok_dir, "--residues", "0-4", "--reference", "consensus",
                     server=("--misbehave", "one-word", "--at-residue", "3"))
    bad = {k: r["verdict"] for k, r in cells(recs).items() if r["verdict"] != "ok"}
    assert bad == {(3, "cold"): "diverged", (3, "self-hit"): "diverged"}
    assert all("majority answer" in r["reason"] for r in recs)


def _rec(cfg, residue, phase, answer, verdict="unjudged"):
    return {"config_id": cfg, "config_label": cfg, "residue": residue, "target_len": 100 + residue,
            "phase": phase, "answer": answer, "verdict": verdict, "sha1": answer,
            "finish_reason": "stop", "reason": ""}


def test_reference_first_judges_every_configuration_against_the_first():
    good = "The cooper polished the weathered barrel by the pier at dawn."
    bad = good.replace("weathered", "zebra")
    recs = [_rec("A", 0, "cold", good), _rec("A", 0, "self-hit", good),
            _rec("B", 0, "cold", bad), _rec("B", 0, "self-hit", good),
            _rec("B", 1, "cold", good), _rec("B", 0, "warm", "", verdict="crash")]
    out = {(r.config_id, r.residue, r.phase): r.as_dict()   # as the driver writes them
           for r in rejudge([PhaseRecord.from_dict(r) for r in recs], "first", ["A", "B"])}
    assert out[("A", 0, "cold")]["verdict"] == "unjudged"   # the reference itself
    assert out[("A", 0, "self-hit")]["verdict"] == "ok"
    assert out[("B", 0, "cold")]["verdict"] == "diverged"
    assert out[("B", 0, "cold")]["first_divergence"]["char"] == good.index("weathered")
    assert out[("B", 0, "self-hit")]["verdict"] == "ok"
    assert out[("B", 1, "cold")]["verdict"] == "unjudged"   # A never answered residue 1
    assert out[("B", 0, "warm")]["verdict"] == "crash"      # failures keep their verdict


def test_under_reference_cold_the_rule_is_still_checked(tmp_path, tok_dir, cli):
    _, recs = hostile_sweep(cli, tok_dir, "--residues", "0-5", "--reference", "cold",
                  server=("--misbehave", "cut2", "--only-hit", "--at-residue", "4"))
    report = next((tmp_path / "reports").glob("*.md")).read_text()
    assert "nothing measured" not in report
    assert {(r["residue"], r["phase"]) for r in recs if r["verdict"] == "broken"} == {(4, "self-hit")}


# a real sweep in a subprocess with real servers: e2e (issue 50: the auto mark missed it)
@pytest.mark.e2e
def test_the_rule_line_says_nothing_where_nothing_was_judged(tmp_path):
    # issue 23 item 6: --phases cold --reference cold leaves every cell unjudged; the rule
    # line read "agrees (no break)" for one configuration and "disagrees: residue 4 is
    # clean" for the other
    import shutil
    import subprocess
    import sys
    from harness.serve.engines import LAB_MODEL_DIR
    from tests.conftest import ROOT
    shutil.copytree(LAB_MODEL_DIR, tmp_path / "model")
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "--model", str(tmp_path / "model"), "--spec", "mtp",
         "--ctx", "huge", "--cudagraph", "FULL_AND_PIECEWISE,PIECEWISE", "--patches", "none",
         "--residues", "3-5", "--phases", "cold", "--reference", "cold", "--slots", "2",
         "--out", str(tmp_path / "results"), "--reports-dir", str(tmp_path / "reports"),
         "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = next((tmp_path / "reports").glob("*.md")).read_text()
    rule = [ln for ln in report.splitlines() if ln.startswith("- **Bug B rule:**")]
    assert len(rule) == 2, report
    for ln in rule:
        assert "agrees" not in ln and "disagrees" not in ln, ln
        assert "**nothing judged**" in ln, ln


def test_no_near_tie_from_the_corrupted_answers_own_logprobs(tmp_path, tok_dir, cli):
    # issue 23 item 7: one wrong word on every request at residue 2 (cold and hit: no
    # clean answer to that prompt anywhere), top-1 ahead by 0.2 nats in the answer's own
    # logprobs. That lead is what the corruption left: the call is unknown, not near-tie.
    _, recs = hostile_sweep(cli, tok_dir, "--residues", "1-3", "--logprobs", "3",
                  server=("--misbehave", "one-word", "--at-residue", "2", "--margin", "0.2"))
    bad = [r for r in recs if r["verdict"] == "diverged"]
    assert {(r["residue"], r["phase"]) for r in bad} == {(2, "cold"), (2, "self-hit")}
    for r in bad:
        fd = r["first_divergence"]
        assert fd["margin_from"] == "answer" and fd["call"] == "unknown", fd
    report = next((tmp_path / "reports").glob("*.md")).read_text()
    assert "0 decisive, 0 near-tie, 2 of unknown margin (2 with no clean answer's logprobs" in report
    assert "margin unknown (no clean logprobs; the answer's own lead 0.20 calls nothing)" in report


def test_a_hit_takes_its_margin_from_the_clean_cold_answer(tok_dir, cli):
    # the cold answer to the same prompt is clean and has logprobs: the hit's margin is
    # that clean reference's at the first differing token
    _, recs = hostile_sweep(cli, tok_dir, "--residues", "2", "--logprobs", "3",
                  server=("--misbehave", "one-word", "--only-hit", "--margin", "0.2"))
    hit = next(r for r in recs if r["phase"] == "self-hit")
    fd = hit["first_divergence"]
    assert hit["verdict"] == "diverged" and fd["margin_from"] == "reference", fd
    assert fd["call"] == "decisive" and fd["in_top_k"] is False   # 'zebra' not in its top-k
