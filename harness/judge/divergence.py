"""Where a non-ok answer leaves its reference, and how close the engine was to staying.

``first_divergence`` is the object every non-ok judged record carries (docs/records.md):

- ``char``: the first character where the answer and the reference text differ;
- ``token``: the first differing completion token, where the server returned tokens
  (logprobs): compared token by token with the reference's tokens when the reference
  answer has them, else the answer's token that covers ``char``;
- ``margin``: top-1 minus top-2 logprob at that token, from the reference's logprobs
  (``margin_from: reference``), else the answer's own (``margin_from: answer``);
- ``call``: ``decisive`` (margin >= ``NEAR_TIE_MARGIN``), ``near-tie`` (below it), or
  ``unknown``: no logprobs, or only the answer's own. A margin says something about noise
  only when it is a clean reference's at that token: a corrupted answer's own top-1 lead
  is what the corruption left, so it is recorded but calls nothing (the report looks for a
  clean answer's logprobs at the same prompt, ``report/divergence.py``);
- ``in_top_k``: vLLM's ``check_logprobs_close`` rule at the first differing token: each
  side's token is among the other's top-k alternatives (None when either side has no
  logprobs). vLLM's own tests accept such a pair as numerical noise.
"""
from __future__ import annotations

from typing import Any

from .verdict import first_char_difference

__all__ = ["NEAR_TIE_MARGIN", "CONTEXT_CHARS", "first_divergence", "calls"]

# Logprob gap (nats) below which a flipped greedy choice is a numerical near-tie. bf16
# keeps 8 mantissa bits (relative error 2^-8 ~ 0.4%); on logits of magnitude 10..30 one
# rounding is 0.04..0.12, and a different kernel or batch shape (a FULL graph against
# eager) accumulates a few: half a nat is beyond what reordering arithmetic moves, and
# well below the several-nat gaps of a model that knows the next token of a copy task.
NEAR_TIE_MARGIN = 0.5
CONTEXT_CHARS = 24
CALLS = ("decisive", "near-tie", "unknown")


def calls() -> tuple[str, ...]:
    return CALLS


def _token_at_char(tokens: list, char: int) -> int | None:
    """Index of the token whose text covers character ``char`` (the last one when the
    answer ended before it)."""
    pos = 0
    for i, t in enumerate(tokens):
        pos += len(t[0])
        if pos > char:
            return i
    return len(tokens) - 1 if tokens else None


def _first_token_difference(a: list, b: list) -> int | None:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i][0] != b[i][0]:
            return i
    return n if len(a) != len(b) else None


def _margin(entry: list | None) -> float | None:
    """top-1 minus top-2 logprob of one ``[token, logprob, alts]`` entry (None with fewer
    than two alternatives: one logprob says nothing about the runner-up)."""
    if not entry:
        return None
    values = [float(lp) for _, lp in entry[2]]
    if entry[0] not in {alt for alt, _ in entry[2]}:
        values.append(float(entry[1]))
    if len(values) < 2:
        return None
    values.sort(reverse=True)
    return round(values[0] - values[1], 4)


def _in_top(token: str, entry: list | None) -> bool | None:
    if not entry or not entry[2]:
        return None
    return token == entry[0] or any(token == alt for alt, _ in entry[2])


def first_divergence(answer: str, reference: str | None, *, answer_tokens: list | None = None,
                     reference_tokens: list | None = None) -> dict[str, Any] | None:
    """The first_divergence object of ``answer`` against ``reference`` (None when there is
    no reference text, or the two are equal)."""
    if reference is None:
        return None
    char = first_char_difference(answer, reference)
    if char is None:
        return None
    out: dict[str, Any] = {
        "char": char, "expected": reference[char:char + CONTEXT_CHARS],
        "got": answer[char:char + CONTEXT_CHARS], "token": None, "expected_token": None,
        "got_token": None, "margin": None, "margin_from": None, "call": "unknown",
        "in_top_k": None}
    if not answer_tokens and not reference_tokens:
        return out
    answer_tokens = answer_tokens or []   # an empty answer: it left at token 0
    if reference_tokens:
        tok = _first_token_difference(answer_tokens, reference_tokens)
    else:
        tok = _token_at_char(answer_tokens, char)
    if tok is None:
        return out
    got = answer_tokens[tok] if tok < len(answer_tokens) else None
    ref = reference_tokens[tok] if reference_tokens and tok < len(reference_tokens) else None
    out["token"] = tok
    out["got_token"] = got[0] if got else None
    out["expected_token"] = ref[0] if ref else None
    margin = _margin(ref) if ref else None
    out["margin_from"] = "reference" if margin is not None else None
    if margin is None:
        margin = _margin(got)
        out["margin_from"] = "answer" if margin is not None else None
    out["margin"] = margin
    if margin is not None and out["margin_from"] == "reference":
        out["call"] = "decisive" if margin >= NEAR_TIE_MARGIN else "near-tie"
    if got and ref:
        a, b = _in_top(got[0], ref), _in_top(ref[0], got)
        out["in_top_k"] = None if a is None or b is None else (a and b)
        if a is False:
            # the answer's token is not even among the reference's alternatives
            out["call"] = "decisive"
    return out
