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
           "sha1", "verbatim_prefix", "repeats", "Judgement", "judge"]

REPEAT_BLOCK = 40
# A collapse keeps less than this fraction of the reference (and at most a few chars):
# the thread's collapses were "", one character, or a handful of tokens.
COLLAPSE_FRACTION = 0.10
COLLAPSE_MAX_CHARS = 8
# The most frequent 40-char block occurring this often is degenerate repetition.
REPEAT_BROKEN = 3

# infra: the point was lost with its node or worker twice (--backend ray), not measured
# (the verdicts themselves are named in harness.vocabulary)


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


def _collapsed(answer: str, expected_chars: int) -> str | None:
    stripped = answer.strip()
    if not stripped:
        return "empty answer"
    limit = max(1, min(COLLAPSE_MAX_CHARS, int(expected_chars * COLLAPSE_FRACTION)))
    if len(stripped) <= limit:
        return f"{len(answer)} char{'s' if len(answer) != 1 else ''} of an expected {expected_chars}"
    return None


def judge(answer: str | None, *, source: str, expected: str | None = None,
          reference_sha1: str | None = None, finish_reason: str | None = None) -> Judgement:
    """Classify one answer.

    ``expected`` is the reference text when the reference is the passage; otherwise
    ``reference_sha1`` (the cold answer's, or a golden run's) decides correctness and
    ``expected`` may be None. ``source`` is the document the answer should come from.
    """
    text = "" if answer is None else answer
    digest = sha1(text)
    n = verbatim_prefix(text, source)
    reps = repeats(text)
    want = reference_sha1 if reference_sha1 is not None else (
        sha1(expected) if expected is not None else None)
    expected_chars = len(expected) if expected is not None else max(len(text), 1)
    base = dict(sha1=digest, verbatim_n=n, verbatim_total=len(text), repeats=reps)
    if want is not None and digest == want:
        return Judgement("ok", "matches the reference sha1", **base)
    stop = f", finish_reason={finish_reason}" if finish_reason else ""
    collapse = _collapsed(text, expected_chars)
    if collapse:
        return Judgement("broken", collapse + stop, **base)
    ref_reps = repeats(expected) if expected is not None else 1
    if reps >= REPEAT_BROKEN and reps > ref_reps:
        return Judgement("broken", f"degenerate repetition: a {REPEAT_BLOCK}-char block "
                         f"{reps}x{stop}", **base)
    if want is None:
        # No reference at all (a cold answer under --reference cold): only a collapse is
        # detectable, and this is not one.
        return Judgement("ok", "no reference; not collapsed", **base)
    if expected is not None and text != expected and text.startswith(expected):
        return Judgement("diverged", f"reference then {len(text) - len(expected)} extra chars",
                         **base)
    return Judgement("diverged", f"differs from the reference after {n} verbatim chars "
                     f"({n}/{len(text)}){stop}", **base)
