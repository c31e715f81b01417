"""What one cell says, in the thread's words, and the footnotes of non-ok cells. A cell is
``model.Cell`` (its record and what its other documents and passes add); the phrases of
one record take a ``PhaseRecord`` (the report's entry points type what they are given)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..text.ghmarkdown import code, escape_text, table
from ..text.phrase import Code, Emph, Phrase, Strong, Text
from ..text.ranges import fmt_ranges
from ..names.phase import phase_key
from ..names.verdict import (BUG_VERDICTS, CLEAN, NOT_FAILED, OPEN, SERVER_LOGGED, VerdictName,
                             verdict_info)
from ..records.phase_record import PhaseRecord
from .divergence import divergence_of, divergence_phrase
from .model import Cell, ConfigData, sha12
from ..names.isolation import IsolationName
from .traffic import beside_phrase

__all__ = ["cell_phrase", "cell_words", "cell_markdown", "cell_view", "cell_annotations",
           "annotation_words", "failure_gist", "reason_short", "Footnote", "Footnotes",
           "REPEAT_MIN", "EXCERPT_CHARS", "REASON_CHARS"]

REPEAT_MIN = 3              # the most frequent 40-char block this often = degenerate repetition
EXCERPT_CHARS = 80          # answer excerpt in the footnotes
REASON_CHARS = 90           # reason inside a bad cell (boot-fail / invalid)


def _is_repetition(r: PhaseRecord) -> bool:
    return (r.repeats or 0) >= REPEAT_MIN


# A server log line that names the failure: "ValueError: ...", "AssertionError", vLLM's
# boot-capacity message. The last such line of the excerpt is the gist.
_GIST = re.compile(r"\b[A-Za-z_.]*(Error|Exception|Interrupt)\b|\bassert(ion)?\b|KV cache is "
                   r"needed|larger than the available|out of memory|Killed|Traceback", re.I)


# Boot failures whose reason is the whole story: the server was alive and not ready in
# time, or never started; a log line that names an error is then not why.
_REASON_IS_WHY = ("not healthy after", "not started:")


def failure_gist(r: PhaseRecord) -> str:
    """One line saying why a crash / boot-fail / timeout happened: the last log line that
    names an error (``ModuleNotFoundError: No module named 'x'``), else the reason; the
    reason itself for a boot that timed out or never started."""
    if (r.reason or "").startswith(_REASON_IS_WHY):
        return reason_short(r)
    lines = [str(x).strip() for x in (r.log_excerpt or []) if str(x).strip()]
    named = [ln for ln in lines if _GIST.search(ln) and not ln.startswith("Traceback")]
    if named:
        return named[-1]
    return reason_short(r)


def reason_short(r: PhaseRecord) -> str:
    reason = (r.reason or "").strip()
    if not reason and r.log_excerpt:
        reason = str(r.log_excerpt[-1]).strip()
    return reason or "no reason recorded"


def cell_phrase(r: PhaseRecord | None) -> str:
    """What a cell says, in the thread's words (markdown, not yet bold)."""
    return cell_words(r).markdown()


def cell_words(r: PhaseRecord | None) -> Phrase:
    """What a cell says, in the thread's words, as structure (``text/phrase.Phrase``: the
    report renders it as markdown, the terminal as plain text)."""
    if r is None:
        return Phrase.of("not run")
    v = r.verdict or "invalid"
    n, total = r.verbatim_n, r.verbatim_total
    nN = f"{n}/{total}" if n is not None and total is not None else "?"
    shown = getattr(verdict_info(v), "cell", "answer")   # names/verdict.VERDICT_TABLE
    if v in CLEAN:
        return Phrase.of(nN)
    if v in OPEN:
        return Phrase.of(f"{nN}, {v}")
    if shown == "word":
        return Phrase.of(v)
    if shown == "gist":
        return Phrase.of(f"{v}: ", Text(failure_gist(r), REASON_CHARS))
    if shown == "reason":
        return Phrase.of(f"{v}: ", Text(reason_short(r), REASON_CHARS))
    return _joined(_answer_parts(r, v, nN), ", ")


def _answer_parts(r: PhaseRecord, v: str, nN: str) -> list:
    """A judged answer's cell: its length or shape, the verdict, what ran beside it, the
    finish reason, tok/step."""
    answer = r.answer or ""
    if answer == "":
        parts: list = ["empty"]
    elif len(answer) == 1:
        parts = ["1 char"]
    elif _is_repetition(r):
        parts = [nN, f"repetition ×{r.repeats}"]
    else:
        parts = [nN]
    if v == VerdictName.DIVERGED:
        parts.append("diverged")
    elif v not in BUG_VERDICTS:
        parts.append(Text(v))
    beside = beside_phrase(r)   # other requests on the server around it (report/traffic)
    if beside:
        parts.append(beside)
    if r.finish_reason:
        parts.append(Code(r.finish_reason))
    tps = r.tok_per_step
    if tps is not None:
        parts.append(f"{float(tps):.2f} tok/step")
    return parts


def _joined(parts: list, sep: str) -> Phrase:
    out: list = []
    for p in parts:
        out += [sep, p] if out else [p]
    return Phrase.of(*out)


def cell_annotations(c: Cell | None) -> str:
    """What a cell of several records adds (report/model.combine_cell), as markdown."""
    return annotation_words(c).markdown()


def annotation_words(c: Cell | None) -> Phrase:
    """What a cell of several records adds (report/model.combine_cell): bad documents,
    a fresh-server verdict, a reused/fresh disagreement."""
    if c is None:
        return Phrase.of()
    parts: list = []
    if c.documents:
        bad, total = c.documents
        parts.append(f"{bad}/{total} documents" if bad else f"{total} documents")
    if c.fresh:
        parts.append("fresh")
    elif c.record.isolation_run == IsolationName.AUTO:
        parts.append(Phrase.of(Text(c.judged_by), " only"))   # no fresh server judged it
    for d in c.disagree:
        where = f" (document {d.document})" if c.documents else ""
        parts.append(Phrase.of(f"⚠ {d.reuse_pass} ", Text(str(d.reuse_verdict)), ", fresh ",
                               Text(str(d.fresh_verdict)), where))
    return _joined(parts, "; ")


def cell_markdown(c: Cell | None, mark: str = "") -> str:
    """A table cell in markdown (``cell_view``)."""
    return cell_view(c, mark).markdown()


def cell_view(c: Cell | None, mark: str = "") -> Phrase:
    """A table cell: what it says, its annotations, strong when not ok; a reference cell
    (--reference cold / first) says ``reference``: the others were judged against it,
    nothing judged it."""
    words = cell_words(c.record if c is not None else None)
    if c is not None and c.reference:
        words = _replaced(words, f", {c.verdict}", ", reference")
    notes = annotation_words(c)
    if notes:
        words = (Phrase.of(words, ", ", notes) if c.verdict not in CLEAN
                 else Phrase.of("ok, ", notes) if c.documents else Phrase.of(words, ", ", notes))
    if c is not None and c.verdict in OPEN:
        return Phrase.of(Emph(words))   # nothing judged it: not a failure, not ok
    if c is not None and c.verdict not in CLEAN:
        words = Phrase.of(Strong(words), f" {mark}" if mark else "")
    return words


def _replaced(words: Phrase, old: str, new: str) -> Phrase:
    """``words`` with the first literal ``old`` (in a harness-made part) said as ``new``."""
    parts = list(words.parts)
    for i, p in enumerate(parts):
        if isinstance(p, str) and old in p:
            parts[i] = p.replace(old, new, 1)
            break
    return Phrase(tuple(parts))


@dataclass
class Footnote:
    """One mark of the footnote table: the cell's record, and every residue and phase
    of its configuration that reads the same."""
    mark: str
    cd: ConfigData
    record: PhaseRecord
    residues: list = field(default_factory=list)
    phases: list = field(default_factory=list)


class Footnotes:
    """Numbered marks (†1, †2, …) for non-ok cells and the sha1 table they point to.

    Identical bad cells of one configuration (same verdict, sha1, wording and reason: a
    boot failure on both phases, one collapse at several residues) share one mark, and the
    footnote lists the residues and phases it stands for."""

    def __init__(self, texts: dict[str, str] | None = None) -> None:
        self.items: list[Footnote] = []
        self._by_key: dict[tuple, Footnote] = {}
        self.texts = texts or {}   # sha1 -> answer: reference texts for first divergences

    def mark(self, cd: ConfigData, c: Cell | None) -> str:
        if c is None or c.verdict in NOT_FAILED:
            return ""
        r = c.record
        key = (cd.config_id, r.verdict, r.sha1, cell_phrase(r), failure_gist(r))
        item = self._by_key.get(key)
        if item is None:
            item = Footnote(f"†{len(self.items) + 1}", cd, r)
            self._by_key[key] = item
            self.items.append(item)
        if r.residue not in item.residues:
            item.residues.append(r.residue)
        if r.phase not in item.phases:
            item.phases.append(r.phase)
        return item.mark

    def render(self, multi: bool, short: dict[str, str]) -> str:
        if not self.items:
            return ""
        # seven columns (eight with several configurations), not twelve: GitHub's page is
        # about 900 pixels wide (issue 50); what travels together shares a cell
        header = ["†"] + (["configuration"] if multi else []) + [
            "cell", "verdict", "sha1", "measured", "why", "answer (excerpt)"]
        rows = [self._row(item, multi, short) for item in self.items]
        return ("Non-ok cells (cell: residue and phase; verdict and finish reason; sha1: the "
                "first 12 hex of the answer's sha1; measured: cached / computed tail tokens "
                "and tok/step; why: the reason, then the first divergence from the "
                "reference; identical cells share a mark):\n\n" + table(header, rows))

    def _row(self, item: Footnote, multi: bool, short: dict[str, str]) -> list[str]:
        cd, r = item.cd, item.record
        ans = r.answer or ""
        excerpt = "`content: null`" if r.content_was_null and not ans else (
            "*(empty)*" if not ans else escape_text(ans, limit=EXCERPT_CHARS))
        tps, cached, tail = r.tok_per_step, r.cached_tokens, r.computed_tail
        reason = escape_text(reason_short(r), limit=120)
        if r.log_excerpt and r.verdict in SERVER_LOGGED:
            reason += " — log: " + escape_text(failure_gist(r), limit=160)
        several = len(item.residues) > 1 or len(item.phases) > 1
        measured = (f"{cached if cached is not None else '–'} / "
                    f"{tail if tail is not None else '–'}"
                    + (f", final chunk {r.final_chunk}" if r.final_chunk is not None else "")
                    + (f" (residue {r.residue} {escape_text(r.phase)})"
                       if several and cached is not None else "")
                    + (f"; {float(tps):.2f} tok/step" if tps is not None else ""))
        return [item.mark] + ([short.get(cd.config_id, code(cd.label))] if multi else []) + [
            f"{fmt_ranges(item.residues)} "
            + escape_text(", ".join(sorted(item.phases, key=phase_key))),
            escape_text(r.verdict) + (f", {code(r.finish_reason)}" if r.finish_reason else ""),
            code(sha12(r)) if r.sha1 else "–", measured,
            f"{reason}; {divergence_phrase(divergence_of(r, self.texts))}", excerpt]
