"""Why a bad cell is bad: its first divergence, the reference it was judged against and
what that reference can see, and the final prefill chunk behind the Bug B rule.

Records of schema 3 carry ``first_divergence``; for older ones (the committed H200
archives) it is computed here from the reference text, recovered as the answer of any
record whose sha1 is the reference's sha1 (every residue of a run asks for the same
passage, so a clean residue's answer is the reference text).

A margin calls a bad answer ``decisive`` or ``near-tie`` only when it is a clean
reference's at the first differing token (``harness.judge.divergence``). The passage has no
logprobs, so where a record's margin is not the reference's, the clean logprobs are
looked for here: an answer that equals the reference text, to the same prompt (model,
case, document, templated length), with logprobs: the cold answer of the same server, a
clean configuration's, or an explain run's clean rerun. Without one the call is
``unknown``, whatever the corrupted answer's own logprobs say.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

from ..judge.bugb import NO_RULE
from ..judge.divergence import first_divergence
from ..text.ghmarkdown import code, escape_text
from ..records.recordkeys import document_of
from ..names.verdict import BUG_VERDICTS, CLEAN, UNJUDGED
from ..names.phase import PhaseName
from ..records.phase_record import PhaseRecord
from .model import ConfigData

__all__ = ["REFERENCE_SIGHT", "ReferenceTexts", "reference_texts", "divergence_of",
           "divergence_phrase", "call_counts", "reference_lines", "final_chunk_line"]

# reference -> (what it can see, what it cannot): docs/flags.md and docs/reports.md repeat it
REFERENCE_SIGHT = {
    "passage": ("any answer that is not the document's passage, in every phase",
                "whether an answer that is not verbatim is still right (a model that "
                "paraphrases reads as diverged everywhere)"),
    "cold": ("a hit that answers differently from the same server's cold answer",
             "a corruption identical in every phase (the cold answer is its own reference: "
             "Bug B in align mode fires cold too); cold cells are unjudged"),
    "first": ("any configuration that answers a prompt differently from the first "
              "configuration, in every phase",
              "a corruption the first configuration shares; the first configuration's own "
              "reference cell is unjudged"),
    "consensus": ("a residue that answers differently from most residues of its "
                  "configuration (Bug B is one residue in a modulus)",
                  "a corruption at most residues, or a configuration with no majority answer"),
    "golden": ("any answer that differs from a trusted run's answer to the same prompt",
               "a corruption the trusted run shares; prompts it did not answer fall back to "
               "the passage"),
}


class ReferenceTexts(dict):
    """sha1 -> answer text, plus ``clean``: prompt -> records whose answer has that sha1
    and carries logprobs (where a clean reference's margin comes from)."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.clean: dict[tuple, list[PhaseRecord]] = {}

    def clean_tokens(self, r: PhaseRecord) -> list | None:
        """The logprobs of a clean answer to ``r``'s prompt equal to its reference text
        (the same configuration's first), None when there is none."""
        found = self.clean.get(_prompt_key(r, r.reference_sha1)) or []
        same = [c for c in found if c.config_id == r.config_id]
        return (same or found)[0].token_logprobs if found else None


def _prompt_key(r: PhaseRecord, sha: str | None) -> tuple:
    return (r.model, r.case_id, document_of(r), r.target_len, sha)


def reference_texts(records: Sequence[PhaseRecord], extra: Iterable[PhaseRecord] = ()
                    ) -> ReferenceTexts:
    """sha1 -> answer text, for every answer in ``records``; ``extra`` (an explain run's
    reruns) adds clean logprobs only."""
    out = ReferenceTexts({r.sha1: r.answer or "" for r in records if r.sha1})
    for r in [*records, *extra]:
        if r.verdict in CLEAN and r.token_logprobs and r.sha1:
            out.clean.setdefault(_prompt_key(r, r.sha1), []).append(r)
    return out


def divergence_of(r: PhaseRecord, texts: dict[str, str]) -> dict | None:
    """The record's first_divergence (computed from the recovered reference text when the
    record predates the field; None when there is no reference text to compare with),
    its margin and call taken from a clean answer's logprobs where the record's are not
    the reference's, else its call ``unknown``."""
    fd = r.first_divergence
    ref = texts.get(r.reference_sha1 or "")
    if not fd:
        if r.verdict not in BUG_VERDICTS or ref is None:
            return None
        fd = first_divergence(r.answer or "", ref, answer_tokens=r.token_logprobs)
    if not fd or fd.get("margin_from") == "reference":
        return fd
    clean = texts.clean_tokens(r) if isinstance(texts, ReferenceTexts) and ref is not None else None
    if clean:
        got = first_divergence(r.answer or "", ref, answer_tokens=r.token_logprobs,
                               reference_tokens=clean)
        if got and got.get("margin_from") == "reference":
            return dict(got, margin_from="clean answer")
    why = "no clean logprobs" if _has_logprobs(r, texts) else "no logprobs"
    return dict(fd, call="unknown", unknown_why=why)


def _has_logprobs(r: PhaseRecord, texts) -> bool:
    return bool(r.token_logprobs) or bool(getattr(texts, "clean", None))


def divergence_phrase(fd: dict | None) -> str:
    """``char 9 (`empty` for `chalk`), token –, margin unknown`` in markdown."""
    if not fd:
        return "–"
    got = escape_text(repr(fd.get("got") or ""), limit=16)
    want = escape_text(repr(fd.get("expected") or ""), limit=16)
    parts = [f"char {fd.get('char')}: {got} for {want}"]
    if fd.get("token") is not None:
        parts.append(f"token {fd['token']}")
    margin = fd.get("margin")
    if margin is not None and fd.get("margin_from") == "answer":
        parts.append(f"margin unknown (no clean logprobs; the answer's own lead {margin:.2f} "
                     "calls nothing)")
    elif margin is not None:
        parts.append(f"margin {margin:.2f} ({fd.get('call')})")
    else:
        parts.append(f"margin unknown ({fd.get('call') or 'unknown'})")
    if fd.get("in_top_k") is not None:
        parts.append("in top-k" if fd["in_top_k"] else "not in top-k")
    return ", ".join(parts)


def call_counts(records: list[PhaseRecord], texts: dict[str, str]) -> Counter:
    """How many bad answers are decisive breaks, near-ties, or of unknown margin."""
    c: Counter = Counter()
    for r in records:
        if r.verdict in BUG_VERDICTS:
            fd = divergence_of(r, texts) or {}
            call = fd.get("call") or "unknown"
            c[call] += 1
            if call == "unknown":
                c[fd.get("unknown_why") or ("no clean logprobs" if _has_logprobs(r, texts)
                                            else "no logprobs")] += 1
    return c


def reference_lines(records: list[PhaseRecord], texts: dict[str, str]) -> list[str]:
    """The report's reference paragraph: what was used, what it can and cannot see, and
    the count of decisive breaks apart from near-ties."""
    refs = sorted({str(r.reference or "passage") for r in records})
    out = []
    for ref in refs:
        key = "golden" if ref.startswith("golden:") else ref
        can, cannot = REFERENCE_SIGHT.get(key, ("?", "?"))
        out.append(f"- **Reference {code(ref)}:** sees {can}; cannot see {cannot}.")
    if "cold" in refs:
        n = sum(1 for r in records if r.verdict == UNJUDGED and r.phase == PhaseName.COLD)
        out.append(f"- **{n} cold cell(s) unjudged:** under `--reference cold` a corruption "
                   "identical in every phase is invisible (the hit matches the corrupted cold "
                   "answer). Use `--reference passage` (the document itself), "
                   "`golden:RUN` (a trusted run), `first` (another configuration) or "
                   "`consensus` (the other residues) to judge the cold phase.")
    calls = call_counts(records, texts)
    if calls:
        why = "no logprobs in the records"
        if calls.get("no clean logprobs"):
            why = (f"{calls['no clean logprobs']} with no clean answer's logprobs at that "
                   "prompt, whose own logprobs call nothing")
            if calls.get("no logprobs"):
                why += f"; {calls['no logprobs']} with no logprobs"
        out.append(f"- **Bad answers:** {calls.get('decisive', 0)} decisive, "
                   f"{calls.get('near-tie', 0)} near-tie, {calls.get('unknown', 0)} of "
                   f"unknown margin ({why}); a near-tie is a top-1 "
                   "lead under 0.5 nats at the first differing token, which numerical noise "
                   "can flip (docs/records.md).")
    return out


def final_chunk_line(cd: ConfigData, k1: int | None) -> str | None:
    """What final prefill chunk the bad hit cells computed, from ``cached / tail`` and the
    record's tail note, rather than assuming ``tail = k + 1``."""
    bad = [r for r in cd.records if r.verdict in BUG_VERDICTS
           and r.phase != PhaseName.COLD and r.computed_tail is not None]
    if not bad:
        return None
    seen: dict[tuple, list[int]] = {}
    for r in bad:
        key = (r.cached_tokens, r.computed_tail, r.prompt_tokens, r.tail_note)
        seen.setdefault(key, []).append(int(r.residue or 0))
    parts = []
    for (cached, tail, length, note), residues in sorted(seen.items(), key=lambda kv: kv[1]):
        s = (f"residue {', '.join(map(str, sorted(set(residues))))}: cached {cached} of "
             f"{length}, computed tail {tail}")
        if note:
            s += f" ({escape_text(note)})"
        elif k1 is not None and tail == k1:   # an engine with no rule names no chunk
            s += " = k + 1" + ("" if str(cd.config.get("engine")) in NO_RULE
                               else ", the final prefill chunk the rule names")
        elif k1 is not None:
            s += (f", not k + 1 = {k1}: the final chunk that hit the bug is the tail itself "
                  "only if nothing split the prefill")
        parts.append(s)
    return "- **Final chunk:** " + "; ".join(parts) + "."
