"""A measured phase judged: whether it can be judged at all (the checks that make it
``invalid``: the prompt's length, an unproven restore, a cold that hit or a hit that did
not), why a match is not a lone-request verdict (``not-lone``), and the fields its record
gets of the answer. Read by ``point.PointRunner``."""
from __future__ import annotations

from typing import Any

from ..judge.divergence import first_divergence
from ..judge.verdict import first_char_difference, sha1
from ..names.verdict import CLEAN, UNJUDGED
from ..names.phase import PhaseName
from ..names.history import COLD_CONTROL
from ..names.reference import MATRIX_REFERENCES, PER_ANSWER_REFERENCES
from ..names.isolation import POLICIES
from ..records.phase_record import ServerBoot
from ..serve.facts import ServerFacts
from .golden import golden_answer
from .hits import budget_final_chunk, intended_tail, tail_note
from .plan import Point
from .traffic import not_lone_reason

__all__ = ["reference_of", "invalid_reason", "not_lone", "cold_by_construction", "measured_fields",
           "control_reference"]


def invalid_reason(point: Point, phase: str, res, templated: int | None, info: ServerFacts,
                   isolation: str, proof=None) -> str | None:
    """Why a phase's answer cannot be judged: its prompt was not the planned length, its
    server's restore was not proven, or its cold or hit was not what the phase is
    (``invalid``); ``isolation``: the run's (a point of auto carries its own); ``proof``:
    the phase's history (``names/history.HistoryProof``), when one ran before it."""
    target = point.plan.target_len
    if templated is not None and templated != target:
        return f"templated length {templated} by the server's /tokenize, target {target}"
    if res.prompt_tokens is not None and res.prompt_tokens != target:
        return f"usage.prompt_tokens {res.prompt_tokens} != target {target}"
    restore = info.restore or {}
    if restore.get("error"):
        return f"restore not proven: {restore['error']}"
    if proof is not None:
        # --history: its proof decides what the phase's cache state had to be (an
        # abort-retry's "cold" retry may hit, an evicted send may miss)
        return None if proof.proven else f"history {proof.name} not proven: {proof.reason}"
    cached = res.cached_tokens
    # None: a live server that does not say; its hits must be proven all the same
    hits = point.cfg.prefix_caching is not False
    if cached is None:
        if phase != PhaseName.COLD and hits:
            return "hit not proven: the server reports no cached tokens"
        if phase == PhaseName.COLD and hits and not cold_by_construction(point, isolation):
            return ("cold not proven: the server reports no cached tokens "
                    f"({point.isolation or isolation} isolation)")
        return None
    if phase == PhaseName.COLD and cached > 0:
        why = (f"cold request hit the cache ({cached} tokens): "
               f"{point.isolation or isolation} isolation not proven")
        if info.reset_error:
            why += f"; /reset_prefix_cache failed: {info.reset_error}"
        return why
    if phase != PhaseName.COLD and hits and cached == 0:
        return f"{phase}: no prefix-cache hit (cached_tokens 0)"
    return None


def not_lone(point: Point, traffic: dict | None, isolation: str) -> str | None:
    """Why this phase is not a lone-request verdict: only on a server the sweep does
    not own (its own servers run nothing else), where /metrics did not show it alone."""
    name = point.isolation or isolation
    if name not in POLICIES or POLICIES[name].lone_by_construction:
        return None
    return not_lone_reason(traffic)


def cold_by_construction(point: Point, isolation: str) -> bool:
    """A fresh server's cold request is the first it serves: cold without
    ``cached_tokens``. A reused or live server's is cold only when the server says so."""
    name = point.isolation or isolation
    return name in POLICIES and POLICIES[name].cold_by_construction


def measured_fields(point: Point, phase: str, res, tps, j, verdict: str, reason: str,
                    expected: str | None, ref_tokens, info: ServerFacts,
                    traffic: dict | None) -> dict[str, Any]:
    """What a judged phase's record holds of its answer: the answer and its judgement
    (``j``, the verdict and reason as the checks left them), the hit measured against the
    intended tail, the first divergence of a non-ok answer, the final chunk."""
    cached = res.cached_tokens
    tail = (res.prompt_tokens - cached) if (cached is not None and
                                            res.prompt_tokens is not None) else None
    want = intended_tail(point, phase)
    divergence = None
    if verdict not in CLEAN:
        divergence = first_divergence(res.answer, expected, answer_tokens=res.token_logprobs,
                                      reference_tokens=ref_tokens)
    measured = {
        "prompt_tokens": res.prompt_tokens, "cached_tokens": cached, "computed_tail": tail,
        "answer": res.answer, "content_was_null": res.content_was_null, "sha1": j.sha1,
        "reference_sha1": sha1(expected) if expected is not None else None,
        "expected_chars": len(point.plan.expected or ""), "verbatim_n": j.verbatim_n,
        "verbatim_total": j.verbatim_total, "repeats": j.repeats,
        "finish_reason": res.finish_reason, "completion_tokens": res.completion_tokens,
        "tok_per_step": tps, "latency_s": round(res.latency_s, 4), "verdict": verdict,
        "reason": reason, "log_excerpt": [],
        "reference_chars": len(expected) if expected is not None else None,
        "first_divergence": divergence, "token_logprobs": res.token_logprobs,
        "intended_tail": want,
        "tail_note": tail_note(point.cfg.as_dict(), info.config or {}, phase,
                               want, tail, point.modulus),
        "final_chunk": budget_final_chunk(info.config or point.cfg.as_dict(),
                                          res.prompt_tokens, cached),
        "traffic": traffic,
    }
    return measured


def reference_of(ref: str, golden: dict, point: Point, phase: str, cold: Any,
                 info: ServerFacts) -> tuple[str | None, list | None]:
    """(reference text, its token logprobs) for this phase; (None, None) when there is
    nothing to judge against (the answer is then ``unjudged`` unless it collapsed)."""
    if ref == "passage" or point.plan.passage_wins:
        return point.plan.expected, None
    if ref == "cold":
        # Only a cold answer that did not collapse is a reference: a collapse repeated
        # on the hit must not read as ok.
        if phase == PhaseName.COLD or cold is None or cold.verdict != UNJUDGED:
            return None, None
        return cold.answer or "", cold.token_logprobs
    if ref in MATRIX_REFERENCES:
        return None, None  # judged across the matrix after the run (run/matrix_reference)
    boot = ServerBoot.of(info.server_boot)
    gold = golden_answer(golden, point, boot.fingerprint if boot else None)
    # A prompt the golden run did not answer (another context or seed) falls back to
    # the passage; the record's reference_sha1 says which was used.
    if gold:
        return gold["text"], gold.get("tokens")
    return point.plan.expected, None


def control_reference(ref: str, proof, expected: str | None,
                      ref_tokens: list | None) -> tuple[str | None, list | None, str]:
    """(reference, its tokens, what the reason adds) once a history's cold control of the
    measured prompt is known (next-turn: ``run/history._cold_control``), proven cold by its
    ``cached_tokens`` 0. Under ``--reference cold`` it is the reference (the cold phase
    answered another prompt: the first turn). Under ``passage`` it is the reference where
    it does not answer the passage: the model does not answer this prompt so even cold (a
    model trained on single-turn prompts copies the first turn's document), and the passage
    would report the model as a cache divergence. Else nothing changes."""
    ctl = next((s for s in (proof.sends if proof is not None else ())
                if s.role == COLD_CONTROL and s.cached_tokens == 0 and "answer" in s.extra),
               None)
    if ctl is None or ref not in PER_ANSWER_REFERENCES:
        return expected, ref_tokens, ""
    answer = ctl.extra["answer"]
    if ref == "cold":
        return answer, None, ("; the reference: the new turn's cold control (the cold phase "
                              "answered the first turn)")
    if answer == expected:
        return expected, ref_tokens, "; the new turn's cold control answers the passage too"
    at = first_char_difference(answer, expected or "")
    return answer, None, ("; the reference: the new turn's cold control, which differs from "
                          f"the passage at char {at} ({answer[:24]!r}, the passage "
                          f"{(expected or '')[:24]!r}): the model's answer, not the cache's")
