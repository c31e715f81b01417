"""What one cell says, in the thread's words, and the footnotes of non-ok cells."""
from __future__ import annotations

import re

from ..ghmarkdown import bold, code, escape_text, table
from ..ranges import fmt_ranges
from ..run.records import (BUG_VERDICTS, NOT_FAILED, OPEN, SERVER_LOGGED, phase_key,
                           verdict_info)
from .explain import divergence_of, divergence_phrase
from .model import ConfigData, sha12

__all__ = ["cell_phrase", "cell_markdown", "cell_annotations", "failure_gist", "reason_short", "Footnotes",
           "REPEAT_MIN", "EXCERPT_CHARS", "REASON_CHARS"]

REPEAT_MIN = 3              # the most frequent 40-char block this often = degenerate repetition
EXCERPT_CHARS = 80          # answer excerpt in the footnotes
REASON_CHARS = 90           # reason inside a bad cell (boot-fail / invalid)


def _is_repetition(r: dict) -> bool:
    return (r.get("repeats") or 0) >= REPEAT_MIN


# A server log line that names the failure: "ValueError: ...", "AssertionError", vLLM's
# boot-capacity message. The last such line of the excerpt is the gist.
_GIST = re.compile(r"\b[A-Za-z_.]*(Error|Exception|Interrupt)\b|\bassert(ion)?\b|KV cache is "
                   r"needed|larger than the available|out of memory|Killed|Traceback", re.I)


# Boot failures whose reason is the whole story: the server was alive and not ready in
# time, or never started; a log line that names an error is then not why.
_REASON_IS_WHY = ("not healthy after", "not started:")


def failure_gist(r: dict) -> str:
    """One line saying why a crash / boot-fail / timeout happened: the last log line that
    names an error (``ModuleNotFoundError: No module named 'x'``), else the reason; the
    reason itself for a boot that timed out or never started."""
    if (r.get("reason") or "").startswith(_REASON_IS_WHY):
        return reason_short(r)
    lines = [str(x).strip() for x in (r.get("log_excerpt") or []) if str(x).strip()]
    named = [ln for ln in lines if _GIST.search(ln) and not ln.startswith("Traceback")]
    if named:
        return named[-1]
    return reason_short(r)


def reason_short(r: dict) -> str:
    reason = (r.get("reason") or "").strip()
    if not reason and r.get("log_excerpt"):
        reason = str(r["log_excerpt"][-1]).strip()
    return reason or "no reason recorded"


def cell_phrase(r: dict | None) -> str:
    """What a cell says, in the thread's words (markdown, not yet bold)."""
    if r is None:
        return "not run"
    v = r.get("verdict") or "invalid"
    n, total = r.get("verbatim_n"), r.get("verbatim_total")
    nN = f"{n}/{total}" if n is not None and total is not None else "?"
    shown = getattr(verdict_info(v), "cell", "answer")   # vocabulary.VERDICT_TABLE
    if v == "ok":
        return nN
    if v in OPEN:
        return f"{nN}, {v}"
    if shown == "word":
        return v
    if shown == "gist":
        return f"{v}: " + escape_text(failure_gist(r), limit=REASON_CHARS)
    if shown == "reason":
        return f"{v}: " + escape_text(reason_short(r), limit=REASON_CHARS)
    answer = r.get("answer") or ""
    if answer == "":
        parts = ["empty"]
    elif len(answer) == 1:
        parts = ["1 char"]
    elif _is_repetition(r):
        parts = [nN, f"repetition ×{r.get('repeats')}"]
    else:
        parts = [nN]
    if v == "diverged":
        parts.append("diverged")
    elif v not in BUG_VERDICTS:
        parts.append(escape_text(v))
    if r.get("finish_reason"):
        parts.append(code(r["finish_reason"]))
    tps = r.get("tok_per_step")
    if tps is not None:
        parts.append(f"{float(tps):.2f} tok/step")
    return ", ".join(parts)


def cell_annotations(r: dict | None) -> str:
    """What a cell of several records adds (report/model.combine_cell): bad documents,
    a fresh-server verdict, a reset/fresh disagreement."""
    if r is None:
        return ""
    parts = []
    docs = r.get("_docs")
    if docs:
        bad, total = docs
        parts.append(f"{bad}/{total} documents" if bad else f"{total} documents")
    if r.get("_fresh"):
        parts.append("fresh")
    for doc, reset_v, fresh_v, *name in r.get("_disagree") or ():
        where = f" (document {doc})" if docs else ""
        parts.append(f"⚠ {(name or ['reset'])[0]} {escape_text(str(reset_v))}, fresh "
                     f"{escape_text(str(fresh_v))}{where}")
    return "; ".join(parts)


def cell_markdown(r: dict | None, mark: str = "") -> str:
    text = cell_phrase(r)
    notes = cell_annotations(r)
    if notes:
        text = f"{text}, {notes}" if r.get("verdict") != "ok" else f"ok, {notes}" if r.get(
            "_docs") else f"{text}, {notes}"
    if r is not None and r.get("verdict") in OPEN:
        return f"*{text}*"   # nothing judged it: not bold (not a failure), not plain (not ok)
    if r is not None and r.get("verdict") != "ok":
        text = bold(text)
        if mark:
            text += f" {mark}"
    return text


class Footnotes:
    """Numbered marks (†1, †2, …) for non-ok cells and the sha1 table they point to.

    Identical bad cells of one configuration (same verdict, sha1, wording and reason: a
    boot failure on both phases, one collapse at several residues) share one mark, and the
    footnote lists the residues and phases it stands for."""

    def __init__(self, texts: dict[str, str] | None = None) -> None:
        self.items: list[dict] = []
        self._by_key: dict[tuple, dict] = {}
        self.texts = texts or {}   # sha1 -> answer: reference texts for first divergences

    def mark(self, cd: ConfigData, r: dict | None) -> str:
        if r is None or r.get("verdict") in NOT_FAILED:
            return ""
        key = (cd.config_id, r.get("verdict"), r.get("sha1"), cell_phrase(r),
               failure_gist(r))
        item = self._by_key.get(key)
        if item is None:
            item = {"mark": f"†{len(self.items) + 1}", "cd": cd, "r": r,
                    "residues": [], "phases": []}
            self._by_key[key] = item
            self.items.append(item)
        if r.get("residue") not in item["residues"]:
            item["residues"].append(r.get("residue"))
        if r.get("phase") not in item["phases"]:
            item["phases"].append(r.get("phase"))
        return item["mark"]

    def render(self, multi: bool, short: dict[str, str]) -> str:
        if not self.items:
            return ""
        header = ["†"] + (["configuration"] if multi else []) + [
            "residue", "phase", "verdict", "sha1", "finish", "tok/step", "cached / tail",
            "first divergence", "reason", "answer (excerpt)"]
        rows = []
        for item in self.items:
            m, cd, r = item["mark"], item["cd"], item["r"]
            ans = r.get("answer") or ""
            excerpt = "`content: null`" if r.get("content_was_null") and not ans else (
                "*(empty)*" if not ans else escape_text(ans, limit=EXCERPT_CHARS))
            tps = r.get("tok_per_step")
            cached = r.get("cached_tokens")
            tail = r.get("computed_tail")
            reason = escape_text(reason_short(r), limit=120)
            if r.get("log_excerpt") and r.get("verdict") in SERVER_LOGGED:
                reason += " — log: " + escape_text(failure_gist(r), limit=160)
            several = len(item["residues"]) > 1 or len(item["phases"]) > 1
            rows.append([m] + ([short.get(cd.config_id, code(cd.label))] if multi else []) + [
                fmt_ranges(item["residues"]),
                escape_text(", ".join(sorted(item["phases"], key=phase_key))),
                escape_text(r.get("verdict")), code(sha12(r)) if r.get("sha1") else "–",
                code(r["finish_reason"]) if r.get("finish_reason") else "–",
                f"{float(tps):.2f}" if tps is not None else "–",
                (f"{cached if cached is not None else '–'} / {tail if tail is not None else '–'}"
                 + (f", final chunk {r['final_chunk']}" if r.get("final_chunk") is not None
                    else "")
                 + (f" (residue {r.get('residue')} {escape_text(r.get('phase'))})"
                    if several and cached is not None else "")),
                divergence_phrase(divergence_of(r, self.texts)), reason, excerpt])
        return ("Non-ok cells (sha1 is the first 12 hex of the answer's sha1; identical cells "
                "share a mark):\n\n" + table(header, rows))


