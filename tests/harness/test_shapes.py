"""Other shapes of the same class (issue 26, docs/shapes.md): the one rule names the final
chunks a chunk budget cuts, with or without prefix caching, and the V2 1-token carve-out;
``--modulus auto`` resolves them; on the lab a chunk-budget sweep with caching off breaks
cold at ``L mod B = k + 1``, auto confirms it on fresh servers, explain names the budget.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.presets import resolve
from harness.judge.bugb import armed_batch, auto_modulus, final_chunk, predict
from harness.settings.configs import modulus_and_why, select_residues
from harness.serve.engines import LAB_MODEL_DIR
from harness.run.hits import budget_final_chunk
from tests.conftest import ROOT

FULL = dict(cudagraph_mode="FULL_AND_PIECEWISE", patches="none")


def cfg(spec="mtp", **kw):
    return resolve(spec, "huge", **{**FULL, **kw})


# -- the rule -------------------------------------------------------------------------
def test_final_chunk_is_cut_from_the_first_uncached_token():
    assert final_chunk(4100, budget=512) == 4          # 8 x 512 + 4
    assert final_chunk(4096, budget=512) == 512
    assert final_chunk(4100, budget=512, hit=3968) == 132   # the tail fits one chunk
    assert final_chunk(4100, budget=None, hit=4096) == 4
    assert final_chunk(300, budget=512) == 300         # within the budget: one chunk


def test_caching_off_with_a_budget_predicts_k_plus_1_mod_the_budget():
    c = cfg(prefix_caching=False, max_num_batched_tokens=512).as_dict()
    p = predict(c, 512)
    assert p.residues == [4] and p.armed and p.budget == 512
    assert "chunk budget 512" in p.why and "prefix caching is off" not in p.why
    # mod 128 the budget tail cannot be resolved, and the rule says so instead of "no break"
    p128 = predict(c, 128)
    assert p128.residues is None and "--modulus auto` sweeps mod 512" in p128.why
    # the fix, or PIECEWISE, still predicts none
    assert predict({**c, "patches": "all"}, 512).residues == []
    assert predict({**c, "cudagraph_mode": "PIECEWISE"}, 512).residues == []


def test_with_caching_the_hit_tails_and_the_cold_budget_tail_both_count():
    c = cfg(max_num_batched_tokens=512).as_dict()
    assert predict(c, 512).residues == [4, 132, 260, 388]
    assert predict(c, 128).residues == [4]
    # a hit unit coarser than the budget (a hybrid's 2048-token page): the hit tail is
    # itself chunked, so it repeats mod the budget
    hy = {**resolve("mtp", "fast", **FULL, max_num_batched_tokens=512).as_dict(),
          "effective_hash_unit": 2048}
    assert predict(hy, 512).residues == [4]
    assert auto_modulus(hy)[0] == 512


def test_a_budget_the_prompts_fit_in_changes_nothing():
    # lab records always carry the engine's 8192 budget: prompts shorter than it are one
    # chunk, and the rule's words stay those of the records written before budgets
    c = {**cfg().as_dict(), "max_num_batched_tokens": 8192}
    assert predict(c, 128, longest=4300).why == predict(cfg().as_dict(), 128).why
    off = {**cfg(prefix_caching=False).as_dict(), "max_num_batched_tokens": 8192}
    assert predict(off, 128, longest=4300).why == ("predicts no break: prefix caching is "
                                                   "off, so no cache hit cuts the prompt tail")


def test_v2_from_0_31_names_the_1_token_tails_to_measure():
    base = {**cfg("ngram", max_num_batched_tokens=512).as_dict(), "engine": "vllm",
            "runner": "v2"}
    p = predict({**base, "vllm_version": "0.31.0"}, 512)
    assert p.residues == [] and not p.armed
    assert p.watch == [1, 129, 257, 385] and "prefill_runs_as_decode" in p.why
    # 0.28's V2 checks has_prefill: nothing to watch
    assert predict({**base, "vllm_version": "0.28.0"}, 512).watch == []


def test_modulus_auto_and_the_tails_residues():
    off = cfg(prefix_caching=False, max_num_batched_tokens=512)
    mod, why = modulus_and_why(off, None)
    assert mod == 512 and "chunk budget 512" in why
    assert modulus_and_why(cfg(), None) == (128, "auto: the match unit 128")
    chosen, note = select_residues("tails:0", off, 512)
    assert chosen == [1, 3, 4, 5] and "4 of 512" in note
    assert len(select_residues("tails:3", off, 512)[0]) == 7


def test_the_recorded_final_chunk_comes_from_the_servers_counts():
    c = {"max_num_batched_tokens": 512}
    assert budget_final_chunk(c, 4100, 0) == 4
    assert budget_final_chunk(c, 4100, 2048) == 4       # a 2,052-token tail, chunked
    assert budget_final_chunk(c, 4100, 3968) is None    # the tail fits one chunk
    assert budget_final_chunk({"max_num_batched_tokens": 8192}, 4100, 0) is None
    assert budget_final_chunk(c, None, 0) is None


# -- the lab, end to end ----------------------------------------------------------------
def _sweep(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    model = tmp_path / "model"
    if not model.exists():
        shutil.copytree(LAB_MODEL_DIR, model)
    proc = subprocess.run([sys.executable, "-m", "harness", "--model", str(model), "--out",
                           str(tmp_path / "out"), "--no-progress", "--slots", "2", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    m = re.search(r"run (\d{8}-\d{6}-[0-9a-f]{4})", proc.stderr)
    assert m, proc.stderr[-3000:]
    return proc, m.group(1)


def _records(tmp_path: Path, run_id: str) -> list[dict]:
    path = tmp_path / "out" / f"{run_id}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.e2e   # the real sweep in a subprocess, with real lab servers
def test_chunk_budget_sweep_breaks_cold_at_k_plus_1_auto_confirms_explain_names_it(tmp_path):
    proc, run_id = _sweep(tmp_path, "--spec", "mtp", "--ctx", "huge", "--cudagraph",
                          "FULL_AND_PIECEWISE", "--patches", "none", "--no-prefix-cache",
                          "--max-num-batched-tokens", "512", "--modulus", "auto",
                          "--residues", "tails:0", "--phases", "cold", "--isolation", "auto",
                          "--auto-sample", "0")
    assert proc.returncode == 1, proc.stderr[-2000:]
    recs = _records(tmp_path, run_id)
    assert {r["modulus"] for r in recs} == {512}
    assert all("chunk budget 512" in r["modulus_why"] for r in recs)
    bad = {(r["residue"], r["isolation"]) for r in recs if r["verdict"] != "ok"}
    fresh_bad = {res for res, iso in bad if iso == "fresh"}
    assert {res for res, _ in bad} == {4} and fresh_bad == {4}, bad
    assert all(r["final_chunk"] == r["residue"] for r in recs)   # L mod 512, cold, no cache
    assert any(r["isolation"] == "fresh" and r["confirms"] == "rule neighbourhood"
               and r["residue"] == 4 for r in recs)
    assert "the sweep agrees: broken exactly at residue 4" in " ".join(proc.stdout.split())
    ex = subprocess.run([sys.executable, "-m", "harness", "explain", run_id, "--out",
                         str(tmp_path / "out"), "--slots", "2", "--residue", "4"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ex.returncode == 0, ex.stderr[-2000:]
    line = next(ln for ln in ex.stdout.splitlines() if ln.startswith("Reproduced"))
    assert "chunk budget" in line.split("Discriminators")[1].split(".")[0]


# -- load: the batched shape ---------------------------------------------------------------
LOAD_ARGS = ("--spec", "mtp", "--ctx", "huge", "--cudagraph", "FULL_AND_PIECEWISE",
             "--patches", "none", "--no-prefix-cache", "--max-num-batched-tokens", "512",
             "--modulus", "auto", "--residues", "4,388", "--phases", "cold")


def _verdicts(recs: list[dict]) -> dict[int, str]:
    return {r["residue"]: r["verdict"] for r in recs}


@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.e2e   # the real sweep in a subprocess, with real lab servers
def test_a_load_sweep_breaks_where_the_lone_sweep_is_clean_and_resumes_the_same(tmp_path):
    # lone: the final chunk of L = 4,100 is 4100 mod 512 = 4 (broken); L = 3,972 ends in 388
    lone, lone_id = _sweep(tmp_path, *LOAD_ARGS)
    lone_recs = _records(tmp_path, lone_id)
    assert {r["target_len"] for r in lone_recs} == {4100, 3972}
    assert _verdicts(lone_recs) == {4: "broken", 388: "ok"}
    assert all("load" not in r for r in lone_recs)
    # four background decodes take 4 x (1 + k) = 16 tokens of each step's budget first, so
    # the measured prefill runs in 496-token chunks: 3,972 = 8 x 496 + 4 ends in a 4-token
    # chunk beside four 4-token decode steps, a uniform batch that replays the verify plan
    proc, run_id = _sweep(tmp_path, *LOAD_ARGS, "--load", "4", "--slots", "1")
    recs = _records(tmp_path, run_id)
    assert _verdicts(recs) == {4: "ok", 388: "broken"}, proc.stderr[-2000:]
    # CI of 9b651b3 (2026-12-05, load ~7-12) once had residue 4's final chunk 100, not 132
    # (docs/testing.md): what ran beside each prefill is in the message when it differs
    assert {r["residue"]: r["final_chunk"] for r in recs} == {4: 132, 388: 4}, \
        json.dumps([{"residue": r["residue"], "load": r.get("load")} for r in recs])
    b = next(r for r in recs if r["residue"] == 388)["load"]
    assert b["n"] == 4 and b["proven"] and b["running_before"] == 4
    assert b["beside"] == {"final_chunk": 4, "prompt": 3972, "computed_before": 3968,
                           "batch_reqs": 5, "batch_tokens": 20, "decode_reqs": 4,
                           "prefill_reqs": 1, "dispatch": "FULL"}
    ok = next(r for r in recs if r["residue"] == 4)["load"]["beside"]
    assert ok["final_chunk"] == 132 and ok["dispatch"] == "PIECEWISE"
    assert "the sweep agrees: broken exactly at residue 388" in " ".join(proc.stdout.split())
    report = (tmp_path / "out" / f"{run_id}.md").read_text()   # the terminal's is short
    assert "Load" in report and "chunk 4 beside 4 decode" in report
    # resume: the second point's record is lost (as if interrupted); the rerun gives the
    # same verdicts under the same load
    path = tmp_path / "out" / f"{run_id}.jsonl"
    kept = [json.dumps(r) for r in recs if r["residue"] == 4]
    path.write_text("\n".join(kept) + "\n")
    res = subprocess.run([sys.executable, "-m", "harness", "--resume", run_id, "--out",
                          str(tmp_path / "out"), "--no-progress"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stderr[-2000:]
    again = _records(tmp_path, run_id)
    assert _verdicts(again) == {4: "ok", 388: "broken"}
    assert next(r for r in again if r["residue"] == 388)["load"]["beside"]["dispatch"] == "FULL"


def _at(recs: list[dict], residue: int) -> dict:
    return next(r for r in recs if r["residue"] == residue)


@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.e2e   # the real sweep in a subprocess, with real lab servers
def test_the_fix_holds_under_load_where_the_unpatched_build_breaks(tmp_path):
    """Issue 33 item 6: the fix is tested only where the shape it is for was built. Both
    builds run the same load: residue 388's final chunk of 4 tokens (1 + k) beside 4 decode
    rows of 4 (20 = 5 x 4 tokens, shape-uniform), read from the server's own scheduler
    trace (``load.beside``); unpatched it replays the verify plan and breaks where the rule
    predicts, patched the same batch runs PIECEWISE and is ok."""
    runs = {}
    for patches in ("none", "all"):
        args = [a if a != "none" else patches for a in LOAD_ARGS]
        proc, run_id = _sweep(tmp_path, *args, "--load", "4", "--slots", "1")
        runs[patches] = (proc, _records(tmp_path, run_id))
    for patches, (_, recs) in runs.items():
        b = _at(recs, 388)["load"]["beside"]
        assert (b["final_chunk"], b["decode_reqs"], b["batch_reqs"], b["batch_tokens"]) \
            == (4, 4, 5, 20), (patches, b)
    (bad, bad_recs), (good, good_recs) = runs["none"], runs["all"]
    assert _verdicts(bad_recs) == {4: "ok", 388: "broken"} and bad.returncode == 1
    assert "predicts residue 388" in bad.stdout
    assert "the sweep agrees: broken exactly at residue 388" in " ".join(bad.stdout.split())
    assert _verdicts(good_recs) == {4: "ok", 388: "ok"}, good.stderr[-2000:]
    assert good.returncode == 0
    assert {p: _at(recs, 388)["load"]["beside"]["dispatch"] for p, (_, recs) in runs.items()} \
        == {"none": "FULL", "all": "PIECEWISE"}


@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.e2e   # the real sweep in a subprocess, with real lab servers
def test_cancel_mode_restarts_backgrounds_and_each_break_follows_its_batch(tmp_path):
    """Cancel mode cuts each background and sends it again before the measured request, so
    what runs beside its final chunk is not known ahead (the measured request may outrun
    a cut, or run beside a re-sent prefill): the shape cannot be built on purpose, and the
    rule names no residue. What it still predicts is per request: unpatched, a measured
    request breaks exactly when its record's ``load.beside`` shows a 4-token final chunk in
    a batch of 4-token rows (452: 4,036 = 8 x 504 + 4 when both backgrounds decode)."""
    args = [a if a != "4,388" else "4,388,452" for a in LOAD_ARGS]
    proc, run_id = _sweep(tmp_path, *args, "--load", "2", "--load-mode", "cancel")
    recs = _records(tmp_path, run_id)
    assert len(recs) == 3 and all(r["load"]["mode"] == "cancel" and r["load"]["n"] == 2
                                  for r in recs)
    # each of the two backgrounds was cut after a few tokens and sent again before the
    # measured request was (the harness waits for it)
    assert all(r["load"]["restarts"] >= 2 for r in recs), [r["load"] for r in recs]
    shaped = {r["residue"] for r in recs if armed_batch(r["load"]["beside"], 4)}
    assert {r["residue"]: r["verdict"] for r in recs} == {
        r["residue"]: "broken" if r["residue"] in shaped else "ok" for r in recs}, \
        [(r["residue"], r["verdict"], r["load"]["beside"]) for r in recs]
    assert proc.returncode == (1 if shaped else 0), proc.stderr[-2000:]
    said = " ".join(proc.stdout.split())   # prose wraps in 120 columns (issue 50)
    assert "names no residue ahead under --load 2 --load-mode cancel" in said
    assert "the sweep agrees" in said and "predicts residues  (" not in proc.stdout


def test_load_flags_are_checked():
    out = subprocess.run([sys.executable, "-m", "harness", "--load-mode", "cancel",
                          "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--load-mode is for --load N" in out.stderr
    out = subprocess.run([sys.executable, "-m", "harness", "--load", "-1", "--dry-run"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--load" in out.stderr


def test_the_dry_run_names_the_batched_residue_under_load():
    out = subprocess.run([sys.executable, "-m", "harness", *LOAD_ARGS, "--load", "4",
                          "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-1500:]
    line = next(ln for ln in out.stdout.splitlines() if "rule predicts" in ln)
    assert line.startswith("  rule predicts: [388]") and "chunk budget 496" in line
    alone = subprocess.run([sys.executable, "-m", "harness", *LOAD_ARGS, "--dry-run"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "rule predicts: [4]" in alone.stdout
    cancel = subprocess.run([sys.executable, "-m", "harness", *LOAD_ARGS, "--load", "4",
                             "--load-mode", "cancel", "--dry-run"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert ("rule predicts: per measured request (names no residue ahead under --load 4 "
            "--load-mode cancel") in cancel.stdout, cancel.stdout[-1500:]


def test_under_load_a_shape_on_none_of_the_lengths_swept_predicts_no_break_there():
    """Issue 33 item 6: with --load 2 the budget is 504, which does not divide the modulus
    512; read per length, neither 4,100 nor 3,972 ends in a 4-token chunk, and the rule
    said "predicts residues  (" with an empty list."""
    c = cfg(prefix_caching=False, max_num_batched_tokens=512).as_dict()
    p = predict(c, 512, longest=4100, load=2, lengths={4: [4100], 388: [3972]})
    assert p.residues == [] and p.armed
    assert p.why.startswith("predicts no break at the lengths swept (k + 1 = 4: the chunk "
                            "budget 504")
    on = predict(c, 512, longest=4100, load=2, lengths={4: [4100], 452: [4036]})
    assert on.residues == [452]
    cancel = predict(c, 512, longest=4100, load=2, load_mode="cancel",
                     lengths={4: [4100], 452: [4036]})
    assert cancel.residues is None and cancel.armed and cancel.per_batch == 4


def test_a_batch_is_armed_when_every_row_is_1_plus_k_tokens():
    beside = {"final_chunk": 4, "batch_reqs": 3, "batch_tokens": 12}
    assert armed_batch(beside, 4) is True
    assert armed_batch({**beside, "batch_tokens": 76, "final_chunk": 68}, 4) is False
    assert armed_batch({**beside, "batch_tokens": 13}, 4) is False   # a prefill row beside
    assert armed_batch(None, 4) is None and armed_batch({}, 4) is None


# -- load on real vLLM: named to measure (reports/h200/shapes/) -----------------------------
def _vllm(spec="mtp", version="0.26.0"):
    c = cfg(spec, engine="vllm", geometry="hybrid", prefix_caching=False,
            max_num_batched_tokens=512).as_dict()
    return {**c, "vllm_version": version, "model_runner": "v1"}


LENGTHS = {4: [1028], 100: [1124], 484: [996]}   # the H200's b_load lengths


def test_on_vllm_a_batched_chunk_is_measured_not_predicted():
    """vLLM 0.26.0 on the H200: MTP's L = 996 ended in a 4-token chunk beside 4 decode rows
    (20 tokens) and broke unpatched on a fresh server but was clean on reset servers, so under
    --load the rule names 484 to measure (auto confirms it fresh); the lone rule (residue 4,
    measured broken) and the lab's batched prediction stay."""
    lone = predict(_vllm(), 512, longest=1124)
    assert lone.residues == [4] and lone.armed
    p = predict(_vllm(), 512, longest=1124, load=4, lengths=LENGTHS)
    assert p.residues == [] and not p.armed and p.watch == [484] and p.budget == 496
    assert p.why.startswith("does not predict a break under `--load 4` on vLLM")
    assert "residue 484 measured, not predicted" in p.why
    assert "4-token chunk beside 4 decode rows (20 tokens" in p.why
    assert "broken unpatched on a fresh server, clean on reset servers" in p.why
    lab = predict(cfg(prefix_caching=False, max_num_batched_tokens=512).as_dict(), 512,
                  longest=1124, load=4, lengths=LENGTHS)
    assert lab.residues == [484] and lab.armed
    ngram = predict(_vllm("ngram", "0.27.1"), 512, longest=1124, load=4, lengths=LENGTHS)
    assert ngram.watch == [484] and "not measured on vLLM 0.27.1" in ngram.why
    assert "ngram's decode rows carry 0 to k drafts" in ngram.why
    fixed = predict({**_vllm(), "patches": "all"}, 512, longest=1124, load=4, lengths=LENGTHS)
    assert fixed.watch == [] and "prefill-discriminator fix is on" in fixed.why


def test_a_break_at_a_watched_residue_is_not_a_disagreement():
    from harness.report.bugb_analysis import agreement
    from harness.records.phase_record import typed
    from harness.report.model import ConfigData

    def cd(verdict484):
        recs = [{"residue": r, "phase": "cold", "verdict": v, "modulus": 512}
                for r, v in ((4, "ok"), (100, "ok"), (484, verdict484))]
        return ConfigData("x", "x", _vllm(), {}, typed(recs))
    p = predict(_vllm(), 512, longest=1124, load=4, lengths=LENGTHS)
    assert agreement(cd("ok"), p) == "**the sweep agrees** (no break)"
    assert agreement(cd("broken"), p) == ("broken at residue 484, which the rule names to "
                                          "measure, not to predict")


def test_the_dry_run_on_vllm_under_load_names_the_residue_to_measure():
    args = ["--engine", "vllm", "--model", str(ROOT / "engine/tinymodel/weights/hybrid"),
            "--geometry", "hybrid", *LOAD_ARGS[:-6], "--residues", "4,100,484",
            "--modulus", "auto", "--phases", "cold", "--context", "1024", "--load", "4",
            "--dry-run"]
    out = subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-1500:]
    line = next(ln for ln in out.stdout.splitlines() if "rule predicts" in ln)
    assert line.startswith("  rule predicts: nothing (does not predict a break under --load 4")
    assert "residue 484 measured, not predicted" in line and "broken unpatched on a fresh" in line


def test_the_report_of_a_vllm_load_sweep_says_measure_not_predicted():
    """sweep report's rule line and ladder for vLLM records under --load (the H200's b_load
    shape, synthetic records: its own were lost): residue 484 is named to measure."""
    from harness.report import render_markdown
    from tests.reports import synth

    recs = []
    for patches in ("none", "all"):
        c = {**synth.make_config(patches=patches, prefix_caching=False, geometry="hybrid"),
             "engine": "vllm", "vllm_version": "0.26.0", "model_runner": "v1",
             "max_num_batched_tokens": 512}
        for residue, length in ((4, 1028), (100, 1124), (484, 996)):
            r = synth.record(c, residue, "cold", modulus=512, isolation="reset")
            r.update(target_len=length, templated_len=length, prompt_tokens=length,
                     computed_tail=length, load={"n": 4, "mode": "steady"})
            recs.append(r)
    md = render_markdown(recs)
    assert "does not predict a break under `--load 4` on vLLM" in md
    assert "broken unpatched on a fresh server, clean on reset servers" in md
    assert re.search(r"^\| none +\| 3/512 +\| clean +\| measure residue 484 +\|$", md, re.M)
    assert "broken at residue 484" not in md
