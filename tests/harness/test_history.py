"""``--history`` (issue 52): the names table, the flag and its one-line refusals, the proof's
round trip through a record, the trace lines a history is proven by, the server flags each
history's servers get (lab and vLLM, by dry run), and --prompt-logprobs' comparison."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from engine.vllm.patches import sched_trace
from harness.errors import UsageError
from harness.names.phase import PHASES
from harness.names.history import (ABORT_CHUNK_BUDGET, HISTORIES, HISTORY_NAMES, NONE,
                                   HistoryProof, HistorySend, history_row)
from harness.options import options_from_argv
from harness.run.history import DRIVERS
from harness.run.history_log import events_of, parse_line
from harness.run.prompt_logprobs import canonical, compared
from harness.records.phase_record import PhaseRecord


def test_every_history_is_one_row_with_a_driver_and_its_words():
    assert HISTORY_NAMES == ("none", "abort-retry", "interleave", "sibling", "evict",
                             "next-turn")
    for h in HISTORIES:
        assert all(str(getattr(h, f)).strip() for f in ("before", "proof", "targets",
                                                         "blind", "rule")), h.name
        if h.name == NONE:
            assert h.at is None and h.live_ok and h.name not in DRIVERS
        else:
            assert h.at in PHASES and h.name in DRIVERS and not h.live_ok
    assert set(DRIVERS) == set(HISTORY_NAMES) - {NONE}
    assert history_row(None) is history_row("none")


def _opts(tmp_path, *argv):
    return options_from_argv([*argv, "--out", str(tmp_path / "o")])


def test_history_is_a_matrix_axis_labelled_and_out_of_the_id_when_none(tmp_path):
    plain = _opts(tmp_path, "--residues", "3")
    opts = _opts(tmp_path, "--history", "none,abort-retry,evict", "--residues", "3")
    none, abort, evict = opts.serving.configs
    assert none == plain.serving.configs[0] and "history" not in none.as_dict()
    assert "history" not in none.label()
    assert abort.history == "abort-retry" and abort.label().endswith("history=abort-retry")
    assert abort.max_num_batched_tokens == ABORT_CHUNK_BUDGET   # the history's budget
    assert evict.num_gpu_blocks and evict.num_gpu_blocks * evict.block_size > 4096 * 2
    assert len({json.dumps(c.identity(), sort_keys=True) for c in opts.serving.configs}) == 3
    given = _opts(tmp_path, "--history", "abort-retry", "--max-num-batched-tokens", "1024",
                  "--residues", "3")
    assert given.serving.configs[0].max_num_batched_tokens == 1024     # the user's budget wins


@pytest.mark.parametrize("argv, says", [
    (["--history", "bogus"], "--history: 'bogus' is not valid; allowed: none, abort-retry"),
    (["--history", "evict", "--phases", "cold"],
     "--history evict runs at the self-hit phase: --phases must have cold, self-hit"),
    (["--history", "sibling", "--phases", "self-hit"],
     "--history sibling runs at the cold phase: --phases must have cold"),
    (["--async-scheduling", "on"], "--async-scheduling: --engine lab has no switch for it"),
    (["--async-scheduling", "maybe", "--engine", "vllm", "--model", "{model}"],
     "--async-scheduling: 'maybe' is not valid; allowed: on, off"),
    (["--url", "http://127.0.0.1:9", "--history", "none,interleave"],
     "--url: --history interleave cannot be proven on a server shared with other traffic"),
])
def test_a_history_mistake_is_one_line(tmp_path, argv, says):
    with pytest.raises(UsageError) as e:
        _opts(tmp_path, *[a.replace("{model}", str(tmp_path)) for a in argv], "--residues", "3")
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_the_cli_says_it_in_one_line_and_exits_2(cli):
    proc = cli.sweep("--history", "evict", "--phases", "cold", "--residues", "3")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "sweep: error: --history evict runs at the self-hit phase: --phases must have "
        "cold, self-hit"]


def _proof() -> HistoryProof:
    return HistoryProof("evict", "self-hit", True, "3 evictors, then the measured send",
                        (HistorySend("evictor", 3959, 0, "chatcmpl-1", "length"),
                         HistorySend("measured", 4100, 0, "chatcmpl-4", "stop")),
                        ("INFO final prefill chunk: request=chatcmpl-4 ...",),
                        {"pool_tokens": 11520}, "miss (cached_tokens 0)")


def _record() -> dict:
    """A record as a sweep writes it (the fields every record has)."""
    return PhaseRecord(
        run_id="r", harness_version="v", config_id="c", config_label="l",
        config={"history": "evict"}, requested_config={"history": "evict"}, config_mismatch=[],
        engine="lab", engine_version="0", patches="all", patch_status=None, model=None,
        slot="cpu0", node="n", isolation="fresh", residue=4, modulus=128, target_len=4100,
        templated_len=4100, templated_len_source="server", phase="self-hit",
        reference="passage", boot_s=0.1, started_at="2026-12-06T00:00:00", rerun="sweep",
        verdict="ok").as_dict()


def test_the_proof_round_trips_a_record_exactly(tmp_path):
    rec = PhaseRecord.from_dict(_record())
    rec.history = _proof()
    written = json.loads(json.dumps(rec.as_dict()))
    back = PhaseRecord.from_dict(written)
    assert isinstance(back.history, HistoryProof) and back.history == _proof()
    assert back.as_dict() == written and list(back.as_dict()) == list(written)
    # a proof as another tool wrote it: its keys' order and a key the shape does not name
    odd = {"proven": False, "name": "sibling", "at": "cold", "reason": "no trace",
           "sends": [{"role": "sibling", "note": 1}], "by": "someone"}
    again = PhaseRecord.from_dict({**written, "history": odd})
    assert again.history.extra == {"by": "someone"} and again.history.sends[0].extra == {"note": 1}
    assert again.as_dict()["history"] == odd
    assert list(again.as_dict()["history"]) == list(odd)
    # a record without one is as it was
    plain = PhaseRecord.from_dict(_record())
    assert "history" not in plain.as_dict() and plain.history is None


def test_the_trace_lines_a_history_is_proven_by():
    text = "\n".join([
        "INFO [scheduler.py:0] prefill chunk: request=chatcmpl-rl-ab-aborted-1f start=0 "
        "tokens=256 of=4100 step=3 batch=chatcmpl-rl-ab-aborted-1f,x",
        "INFO [scheduler.py:0] aborted request=chatcmpl-rl-ab-aborted-1f computed=512 of=4100 "
        "step=4",
        "INFO [scheduler.py:0] final prefill chunk: request=chatcmpl-00000001 tokens=4 "
        "prompt=4100 computed=4096 batch_reqs=2 batch_tokens=8 decode_reqs=1 prefill_reqs=1 "
        "dispatch=PIECEWISE",
        "INFO something else"])
    chunk, abort, final = events_of(text)
    assert (chunk.kind, chunk.start, chunk.tokens, chunk.of, chunk.step) == ("chunk", 0, 256,
                                                                            4100, 3)
    assert chunk.batch == ("chatcmpl-rl-ab-aborted-1f", "x")
    assert (abort.kind, abort.start, abort.of, abort.step) == ("abort", 512, 4100, 4)
    assert (final.kind, final.tokens, final.start, final.prefill_reqs) == ("final", 4, 4096, 1)
    assert chunk.of_send("rl-ab-aborted", 4100) and not chunk.of_send("rl-ab-retry", 4100)
    assert final.of_send("rl-zz", 4100)          # untagged by the server: by its length
    assert not final.of_send("rl-zz", 4099)
    assert parse_line("prefill chunk: nonsense") is None


def test_the_vllm_trace_writes_chunk_and_abort_lines_in_that_format():
    reqs = {"chatcmpl-rl-1-aborted-9": SimpleNamespace(
        num_computed_tokens=512, num_prompt_tokens=4100, is_finished=lambda: False),
        "d": SimpleNamespace(num_computed_tokens=904, num_prompt_tokens=600,
                             is_finished=lambda: False)}
    lines = sched_trace.chunk_lines(reqs, {"chatcmpl-rl-1-aborted-9": 256, "d": 4}, step=7)
    assert len(lines) == 1   # the decode row writes none
    (e,) = events_of(lines[0])
    assert (e.kind, e.start, e.tokens, e.of, e.step) == ("chunk", 256, 256, 4100, 7)
    (a,) = events_of("\n".join(sched_trace.abort_lines(reqs, ["chatcmpl-rl-1-aborted-9"], 8)))
    assert (a.kind, a.start, a.of, a.step) == ("abort", 512, 4100, 8)


@pytest.mark.parametrize("history, flags", [
    ("abort-retry", ["--max-num-batched-tokens", str(ABORT_CHUNK_BUDGET)]),   # lab: + align
    ("sibling", ["--max-num-batched-tokens 8192"]),   # 2 x residue 0 of --context 4096
    ("evict", ["--num-gpu-blocks-override"]),
    ("interleave", []), ("next-turn", []),
])
@pytest.mark.parametrize("engine", ["lab", "vllm"])
def test_each_historys_servers_get_their_flags(cli, tmp_path, engine, history, flags):
    model = tmp_path / "model"
    model.mkdir()
    extra = ["--engine", "vllm", "--model", str(model), "--async-scheduling", "off"] \
        if engine == "vllm" else []
    proc = cli.sweep("--dry-run", "--history", history, "--residues", "4", *extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    server = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("server:"))
    if engine == "vllm" and history == "abort-retry":   # half the context, whole blocks
        flags = ["--max-num-batched-tokens 2048"]   # --context 4096
    if engine == "vllm" and history == "evict":   # FULL graphs: a state block a sequence
        flags = [*flags, "--max-num-seqs"]
    for flag in flags:
        assert flag in server, server
    assert f"history={history}" in proc.stdout
    if engine == "vllm":
        assert "RESIDUE_LAB_SCHED_TRACE=1" in server and "--no-async-scheduling" in server
        assert "VLLM_SERVER_DEV_MODE=1" in server   # sibling's pause is a dev endpoint


def test_prompt_logprobs_name_the_first_position_that_differs():
    cold = canonical([None, {"5": {"logprob": -0.5}}, {"9": {"logprob": -1.0}},
                      {"3": {"logprob": -2.0}}])
    same = canonical([None, {"5": {"logprob": -0.51}}, {"9": {"logprob": -1.0}},
                      {"3": {"logprob": -2.0}}])
    off = canonical([None, {"5": {"logprob": -0.5}}, {"9": {"logprob": -3.0}},
                     {"3": {"logprob": -2.0}}])
    assert compared(same, cold) == {"compared": 4, "first_difference": None}
    found = compared(off, cold)
    assert found["first_difference"] == 2 and found["cold"] == [["9", -1.0]]
    assert compared(None, cold)["why"] == "the server returned no prompt logprobs"


def test_explain_tries_history_none_first(tmp_path):
    from harness.explain.plan import axis_changes
    (cfg,) = _opts(tmp_path, "--history", "evict", "--residues", "3").serving.configs
    assert axis_changes(cfg)[0] == ("history", "history → none", {"history": "none"})
    (plain,) = _opts(tmp_path, "--residues", "3").serving.configs
    assert all(axis != "history" for axis, _, _ in axis_changes(plain))


def test_the_effective_configuration_says_when_vllm_turned_async_scheduling_off():
    from engine.vllm.effective import parse_effective_config
    line = ("WARNING 12-06 10:00:00 [vllm.py:1113] Async scheduling not supported with "
            "ngram-based speculative decoding and will be disabled.")
    got = parse_effective_config(line + "\n")
    assert got["async_scheduling"] == "off" and got["async_scheduling_why"].startswith(
        "Async scheduling not supported with ngram")
    assert "async_scheduling" not in parse_effective_config("INFO nothing of it\n")


def test_the_pytest_plugins_failure_names_the_history_and_its_proof():
    from harness.pytest_plugin import failure_message
    rec = PhaseRecord.from_dict({**_record(), "verdict": "invalid",
                                 "reason": "history evict not proven: not evicted"})
    rec.history = dataclasses.replace(_proof(), proven=False, reason="not evicted")
    result = SimpleNamespace(not_ok=[rec], exit_code=1, run_id="r", report_path="rep.md",
                             records_path=None, manifest=None)
    said = failure_message(result, ["--history", "evict"])
    assert "      history evict: not evicted" in said.splitlines()


def test_vllm_abort_budget_clears_the_promoted_hybrid_block_and_splits_the_prompt(tmp_path):
    """vLLM 0.26.0 on the H100 (2026-12-06) promoted the tiny hybrid's block to 256 at k = 3
    and refused a budget of one 128-token block ("In Mamba cache align mode, block_size (256)
    must be <= max_num_batched_tokens (128)"): the abort's budget is half the context in whole
    blocks, so it clears that block and the prompt still takes several chunks."""
    model = tmp_path / "model"
    model.mkdir()
    for context in (1200, 4096, 16384):
        opts = options_from_argv(["--engine", "vllm", "--model", str(model), "--history",
                                  "abort-retry", "--context", str(context),
                                  "--residues", "4"])
        cfg = opts.serving.configs[0]
        budget = cfg.max_num_batched_tokens
        assert budget % cfg.block_size == 0 and 256 <= budget < context
        assert context / budget >= 2   # the pause lands mid-prefill: chunks to spare
