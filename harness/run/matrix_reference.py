"""References taken from the matrix itself, judged once every point has run.

- ``first`` (vLLM's ``compare_all_settings``: every setting against the first): each
  prompt's answers under every configuration are judged against the FIRST
  configuration's answer to the same prompt (residue, templated length), in its earliest
  phase that produced an answer that did not collapse. That one cell stays ``unjudged``:
  it is the reference, nothing judges it.
- ``consensus`` (the seed repository's sweep, scored against the median of the other
  residues): every answer of a configuration is judged against the answer most of that
  configuration's cells give, across residues and phases (every residue of a run asks for
  the same passage). Without a strict majority of at least ``CONSENSUS_MIN`` answers there
  is no consensus and the cells stay ``unjudged``.

While the sweep runs, points are judged with no reference (``unjudged`` unless they
collapse); ``rejudge`` replaces those verdicts, and the driver's caller rewrites the
results file with them. Failed cells (crash, timeout, invalid, ...) keep their verdict.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable

from ..judge.divergence import first_divergence
from ..records.recordkeys import cell_key, document_of
from ..judge.verdict import judge, sha1
from ..names.verdict import CLEAN, OPEN
from ..records.phase_record import PhaseRecord

__all__ = ["CONSENSUS_MIN", "rejudge", "first_references", "consensus_references"]

CONSENSUS_MIN = 3
# OPEN (harness.names.verdict): provisional verdicts a matrix reference may replace.


def _answered(r: PhaseRecord) -> bool:
    return r.verdict in OPEN


def _prompt(r: PhaseRecord) -> tuple:
    """One prompt: a --prompts case's by the sha1 of its messages, else (residue,
    templated length, document)."""
    if r.prompt_sha1:
        return ("prompt", r.prompt_sha1)
    return (r.residue, r.target_len, document_of(r))


def _question(r: PhaseRecord) -> tuple:
    """What one configuration's residues all answer alike: the same case and document."""
    return (r.config_id, r.case_id, document_of(r))


def first_references(records: list[PhaseRecord], config_order: Iterable[str]
                     ) -> dict[tuple, PhaseRecord]:
    """``{_prompt: the first configuration's reference record}``."""
    order = [c for c in config_order]
    first = order[0] if order else None
    out: dict[tuple, PhaseRecord] = {}
    phase_rank = {"cold": 0, "warm": 1, "self-hit": 2}
    for r in sorted((r for r in records if r.config_id == first and _answered(r)),
                    key=lambda r: phase_rank.get(r.phase, 9)):
        out.setdefault(_prompt(r), r)
    return out


def consensus_references(records: list[PhaseRecord]) -> dict[tuple, PhaseRecord]:
    """``{(config_id, case, document): a record carrying the majority answer}`` where
    there is one."""
    by_cfg: dict[tuple, list[PhaseRecord]] = {}
    for r in records:
        if _answered(r):
            by_cfg.setdefault(_question(r), []).append(r)
    out: dict[tuple, PhaseRecord] = {}
    for cid, rs in by_cfg.items():
        counts = Counter(r.sha1 for r in rs)
        digest, n = counts.most_common(1)[0]
        if len(rs) >= CONSENSUS_MIN and 2 * n > len(rs):
            out[cid] = next(r for r in rs if r.sha1 == digest)
    return out


def _judge_against(r: PhaseRecord, ref: PhaseRecord, what: str) -> PhaseRecord:
    """A copy of ``r`` judged against ``ref``'s answer."""
    text, expected = r.answer or "", ref.answer or ""
    j = judge(text, source="", expected=expected, finish_reason=r.finish_reason)
    return r.replaced(
        verdict=j.verdict, reference_sha1=sha1(expected), reference_chars=len(expected),
        reason=(f"{j.reason} (against {what}: {ref.config_label} residue "
                f"{ref.residue} {ref.phase})"),
        first_divergence=None if j.verdict in CLEAN else first_divergence(
            text, expected, answer_tokens=r.token_logprobs,
            reference_tokens=ref.token_logprobs))


def rejudge(records: list[PhaseRecord], mode: str,
            config_order: Iterable[str]) -> list[PhaseRecord]:
    """The records with every open (``unjudged``) verdict judged against the matrix
    reference ``mode`` (``first`` | ``consensus``); the order of the records is kept.
    Each record comes back as it was (the same object when nothing changed), a judged
    one as a copy written as it was but for what judging it set."""
    if mode == "first":
        refs = first_references(records, config_order)
        pick = lambda r: refs.get(_prompt(r))  # noqa: E731
        what = "the first configuration's answer"
        missing = "the first configuration gave no answer to this prompt that did not collapse"
    elif mode == "consensus":
        refs_c = consensus_references(records)
        pick = lambda r: refs_c.get(_question(r))  # noqa: E731
        what = "the configuration's majority answer"
        missing = (f"no answer has a strict majority of this configuration's cells "
                   f"(at least {CONSENSUS_MIN} answers needed)")
    else:
        raise ValueError(f"not a matrix reference: {mode!r}")
    out = []
    for r in records:
        if not _answered(r):
            out.append(r)
            continue
        ref = pick(r)
        if ref is None:
            out.append(r.replaced(reason=f"unjudged: {missing}"))
        elif ref is r or cell_key(ref) == cell_key(r):
            if mode == "consensus":
                out.append(_judge_against(r, ref, what))
            else:
                out.append(r.replaced(reason="unjudged: this answer is the reference "
                                             "(--reference first) the others are judged against"))
        else:
            out.append(_judge_against(r, ref, what))
    return out
