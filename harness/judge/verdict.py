"""Judging one answer: sha1, verbatim n/N, repeats, and the verdict.

The thread's method lessons are the rules here (DESIGN §1):
- ``content: null`` is the empty answer, never a crash;
- the longest verbatim prefix alone would call one wrong character a collapse, so a
  *broken* answer must also look collapsed (next to nothing, or degenerate repetition),
  and everything else that is wrong is *diverged*;
- a refusal is not a collapse: it is judged against the reference like any other text.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass

__all__ = ["REPEAT_BLOCK", "COLLAPSE_FRACTION", "COLLAPSE_MAX_CHARS", "REPEAT_BROKEN",
           "sha1", "verbatim_prefix", "repeats", "Judgement", "judge", "first_char_difference"]

REPEAT_BLOCK = 40
# A collapse keeps at most this fraction of the REFERENCE's length (whatever the reference
# is: the passage, the cold answer, a golden or the first configuration's answer). Derived
# from the real vLLM 0.26.0 records in reports/h200/results: the collapses there kept 5 of
# 276 chars (1.8%) and 13 of 278 (4.7%, ' first frost.' with stop); every divergence kept
# 254..292 chars of 261..278 (>= 91%), and a one-word change keeps ~100%. A tenth sits
# 2x above the largest collapse and 9x below the smallest divergence, and keeps a refusal
# (a sentence, ~60 of ~250 chars) out of the collapses: it is a wrong answer, diverged.
COLLAPSE_FRACTION = 0.10
# Without any reference length (the cold phase under --reference cold) only an answer of
# next to nothing is a collapse: the thread's "", one character, a handful of chars.
COLLAPSE_MAX_CHARS = 8
# The most frequent 40-char block occurring this often is degenerate repetition.
REPEAT_BROKEN = 3

# infra: the point was lost with its node or worker twice (--backend ray), not measured
# (the verdicts themselves are named in harness.names.verdict)


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def verbatim_prefix(answer: str, source: str) -> int:
    """Length of the longest prefix of ``answer`` that occurs verbatim in ``source``."""
    if not answer:
        return 0
    lo, hi = 0, len(answer)  # invariant: answer[:lo] in source
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if answer[:mid] in source:
            lo = mid
        else:
            hi = mid - 1
    return lo


def repeats(answer: str, block: int = REPEAT_BLOCK) -> int:
    """Occurrences of the most frequent ``block``-char window (1 for ordinary text, 0 for
    text shorter than a block)."""
    if len(answer) < block:
        return 0
    counts = Counter(answer[i:i + block] for i in range(len(answer) - block + 1))
    # A window recurring at a fixed period counts once per period; overlapping runs of one
    # character would count every position, so count non-overlapping occurrences only.
    text, best = answer, 1
    for window, n in counts.most_common(3):
        if n <= best:
            break
        occ, start = 0, 0
        while True:
            i = text.find(window, start)
            if i < 0:
                break
            occ += 1
            start = i + block
        best = max(best, occ)
    return best


@dataclass(frozen=True)
class Judgement:
    verdict: str
    reason: str
    sha1: str
    verbatim_n: int
    verbatim_total: int
    repeats: int


def _plural(n: int) -> str:
    return f"{n} char{'s' if n != 1 else ''}"


def _collapsed(answer: str, reference_chars: int | None) -> str | None:
    """Why ``answer`` is a collapse measured against the reference's length, or None."""
    stripped = answer.strip()
    if not stripped:
        return "empty answer"
    if reference_chars is None:
        if len(stripped) <= COLLAPSE_MAX_CHARS:
            return f"{_plural(len(answer))} with no reference to measure against"
        return None
    limit = max(1, int(reference_chars * COLLAPSE_FRACTION))
    if len(stripped) <= limit:
        return f"{_plural(len(answer))} of the reference's {reference_chars}"
    return None


def first_char_difference(answer: str, reference: str) -> int | None:
    """Index of the first character where ``answer`` and ``reference`` differ (the shorter
    one's length when one is a prefix of the other); None when they are equal."""
    if answer == reference:
        return None
    n = min(len(answer), len(reference))
    for i in range(n):
        if answer[i] != reference[i]:
            return i
    return n


def judge(answer: str | None, *, source: str, expected: str | None = None,
          reference_sha1: str | None = None, finish_reason: str | None = None) -> Judgement:
    """Classify one answer against its reference.

    ``expected`` is the reference TEXT (the passage, the cold answer, a golden answer, the
    first configuration's answer): its sha1 decides correctness and its length decides a
    collapse. ``reference_sha1`` alone (no text) decides correctness only. With neither,
    the answer is ``unjudged`` unless it collapsed (then ``broken``): nothing says it is
    right. ``source`` is the document the answer should come from (verbatim n/N).
    """
    text = "" if answer is None else answer
    digest = sha1(text)
    n = verbatim_prefix(text, source)
    reps = repeats(text)
    want = sha1(expected) if expected is not None else reference_sha1
    base = dict(sha1=digest, verbatim_n=n, verbatim_total=len(text), repeats=reps)
    if want is not None and digest == want:
        return Judgement("ok", "matches the reference sha1", **base)
    stop = f", finish_reason={finish_reason}" if finish_reason else ""
    collapse = _collapsed(text, len(expected) if expected is not None else None)
    if collapse:
        return Judgement("broken", collapse + stop, **base)
    ref_reps = repeats(expected) if expected is not None else 1
    if reps >= REPEAT_BROKEN and reps > ref_reps:
        return Judgement("broken", f"degenerate repetition: a {REPEAT_BLOCK}-char block "
                         f"{reps}x{stop}", **base)
    if want is None:
        return Judgement("unjudged", "no reference to judge against; not collapsed", **base)
    if expected is None:
        return Judgement("diverged", f"differs from the reference (sha1){stop}", **base)
    at = first_char_difference(text, expected)
    if finish_reason == "length" and expected.startswith(text):
        return Judgement("invalid", f"cut by max_tokens after {_plural(len(text))} of the "
                         f"reference's {len(expected)} (finish_reason=length): raise "
                         "--max-tokens", **base)
    if text.startswith(expected):
        return Judgement("diverged", f"reference then {len(text) - len(expected)} extra chars",
                         **base)
    return Judgement("diverged", f"differs from the reference at char {at} "
                     f"({n}/{len(text)} verbatim){stop}", **base)
