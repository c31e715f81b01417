"""next-turn's cold control: the new (two-turn) prompt sent again on an emptied prefix cache
after the measured send, and the judge's use of it.

On vLLM 0.26.0 (tiny trained hybrid, H100, 2026-12-06) every next-turn self-hit answered the
FIRST turn's passage and was called ``diverged``; the same prompt answered cold without any
cache (transformers, CPU) gives the same bytes: the model, trained on single-turn prompts
only, cannot answer a second turn. Without a cold control of that prompt the passage judged
the model, not the cache."""
from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import pytest

from engine.prompts.planner import PromptPlan
from harness.judge.verdict import judge
from harness.names.history import COLD_CONTROL, HistoryProof, HistorySend
from harness.run.history import HistoryRun, next_turn
from harness.run.phase_judge import control_reference
from harness.run.plan import Point
from harness.serve.client import ChatResult, ServerError

FIRST = "Near the chalk cliffs, the cooper answered.\nThe granary.\nThe solemn meadow."
FIRST_DOC = FIRST + "\nA fourth line.\nA fifth line."


class _Server:
    """/tokenize counts words plus 3 a message (one ' ~' is one token); chat answers what
    ``answers`` says for the prompt as it stands (hit or cold); the order of calls is kept."""

    def __init__(self, answer_of, reset_status: int | None = None):
        self.calls: list[tuple] = []
        self.answer_of, self.reset_status, self.cached = answer_of, reset_status, False

    async def tokenize(self, messages, model):
        return sum(len(m["content"].split()) + 3 for m in messages)

    async def reset_prefix_cache(self):
        self.calls.append(("reset",))
        if self.reset_status:
            raise ServerError(self.reset_status, "not served")
        self.cached = False

    async def ask(self, messages=None, request_id=None):
        n = await self.tokenize(messages, "m")
        hit = 40 if self.cached else 0
        self.calls.append(("chat", request_id, hit))
        self.cached = True
        return ChatResult(self.answer_of(hit), False, "stop", n, hit, 20, 0.1,
                          request_id=request_id)


def _run(server: _Server) -> HistoryRun:
    plan = PromptPlan(residue=5, modulus=16, target_len=30, pad_count=0,
                      messages=({"role": "user", "content": "Reproduce ...\n\n" + FIRST_DOC},),
                      warmup_messages=(), expected=FIRST, document=FIRST_DOC)
    point = Point(SimpleNamespace(history="next-turn"), "c", 5, 16, plan, "rerun")
    run = HistoryRun(point, SimpleNamespace(tokenize=server.tokenize,
                                            reset_prefix_cache=server.reset_prefix_cache),
                     "m", None, 30, 5.0, 3, server.ask)
    server.cached = True   # the cold phase served the first turn
    return run


def _measured(answer_of, reset_status=None):
    server = _Server(answer_of, reset_status)
    res, proof, point, templated = asyncio.run(next_turn(_run(server)))
    return server, res, proof, point


def test_the_new_turn_is_sent_again_cold_after_the_measured_send():
    server, res, proof, point = _measured(lambda hit: FIRST)
    assert proof.proven and res.cached_tokens == 40 and point.plan.expected != FIRST
    tag = proof.sends[0].request_id.rsplit("-", 1)[0]
    assert server.calls == [("chat", f"{tag}-turn2", 40), ("reset",),
                            ("chat", f"{tag}-turn2-cold", 0)]
    measured, control = proof.sends
    assert (measured.role, control.role) == ("turn-2", COLD_CONTROL)
    assert control.cached_tokens == 0 and control.extra == {"answer": FIRST}
    assert control.prompt_tokens == measured.prompt_tokens == point.plan.target_len
    # the record's history key keeps the control's answer through a round trip
    assert HistoryProof.from_dict(proof.as_dict()) == proof
    assert HistoryProof.from_dict(proof.as_dict()).sends[1].extra["answer"] == FIRST


def _judged(proof, point, answer, ref="passage"):
    expected, _, note = control_reference(ref, proof, point.plan.expected, None)
    j = judge(answer, source=point.plan.document, expected=expected, finish_reason="stop")
    return j.verdict, j.reason + note


def test_a_model_that_cannot_answer_the_second_turn_is_not_a_cache_divergence():
    """The vLLM run's shape: hit and cold answer the first turn's passage alike."""
    _, res, proof, point = _measured(lambda hit: FIRST)
    verdict, reason = _judged(proof, point, res.answer)
    assert verdict == "ok", reason
    assert "the new turn's cold control, which differs from the passage at char 0" in reason
    assert "the model's answer, not the cache's" in reason
    # without the control (the code before it) the passage called the model a divergence
    bare = judge(res.answer, source=point.plan.document, expected=point.plan.expected)
    assert bare.verdict == "diverged"


def test_a_hit_that_differs_from_its_cold_control_is_still_diverged():
    _, res, proof, point = _measured(lambda hit: FIRST if hit else "something else here")
    verdict, reason = _judged(proof, point, res.answer)
    assert verdict == "diverged" and "differs from the reference at char 0" in reason


def test_a_control_that_answers_the_passage_keeps_the_passage():
    """A model that answers the second turn: the passage judges (a hit that differs from it
    is a divergence, and the reason says the cold control got it right)."""
    _, res, proof, point = _measured(lambda hit: FIRST)
    right = dataclasses.replace(proof, sends=tuple(
        dataclasses.replace(s, extra={"answer": point.plan.expected})
        if s.role == COLD_CONTROL else s for s in proof.sends))
    expected, tokens, note = control_reference("passage", right, point.plan.expected, [1])
    assert (expected, tokens) == (point.plan.expected, [1])
    assert note == "; the new turn's cold control answers the passage too"
    verdict, reason = _judged(right, point, FIRST)
    assert verdict == "diverged" and reason.endswith("answers the passage too")


def test_under_reference_cold_the_control_not_the_first_turn_is_the_reference():
    _, res, proof, point = _measured(lambda hit: FIRST)
    expected, _, note = control_reference("cold", proof, None, None)
    assert expected == FIRST and "the cold phase answered the first turn" in note


@pytest.mark.parametrize("why, proof", [
    ("no history", None),
    ("not cold", HistoryProof("next-turn", "self-hit", True, "r", (
        HistorySend(COLD_CONTROL, 50, 16, extra={"answer": "x"}),))),
    ("reset refused", HistoryProof("next-turn", "self-hit", True, "r", (
        HistorySend(COLD_CONTROL, extra={"skipped": "/reset_prefix_cache: HTTP 404"}),))),
])
def test_without_a_proven_cold_control_the_reference_is_unchanged(why, proof):
    assert control_reference("passage", proof, "the passage", None) == ("the passage", None, "")
    assert control_reference("first", proof, None, None) == (None, None, "")


def test_a_refused_reset_sends_no_control_and_says_why():
    server, res, proof, point = _measured(lambda hit: FIRST, reset_status=404)
    assert [c[0] for c in server.calls] == ["chat", "reset"]
    assert proof.sends[1].extra["skipped"].startswith("/reset_prefix_cache: HTTP 404")
    assert control_reference("passage", proof, point.plan.expected, None)[2] == ""
