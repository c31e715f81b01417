"""The report as the terminal shows it: short, and aligned as plain text.

The markdown report (a file, a GitHub comment, the step summary) is the whole story; the
terminal gets what a person reads at the end of a sweep: the title, the lab notice, the
headline, one line per configuration (its counts and what the Bug B rule says), the
results table, the non-ok cells one line each, and where the rest is. Tables are the
report's own rows (``sections.results_rows``: ``text/phrase.Phrase`` cells), each cell's
plain text padded with the width a terminal gives each character (a wide CJK character
takes two columns, a combining mark none), so every column lines up; no markdown is made
for the table and taken out again.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import unicodedata

from ..text.phrase import Phrase
from ..text.plaintext import align_table, display_width, inline_to_plain, wrap_prose
from ..text.ranges import fmt_ranges
from ..names.verdict import UNANSWERED
from ..names.phase import phase_key
from ..records.phase_record import PhaseRecord, RecordsIn, typed
from ..records.recordkeys import latest_records
from ..records.gate_block import BaselineBlock
from ..records.manifest import RunManifest, typed_manifests
from .auto import agreement_line
from .bugb_analysis import agreement, predict_bug_b
from .cases import case_groups, case_suffix
from .cells import EXCERPT_CHARS, Footnote, Footnotes, failure_gist
from .engine_notice import engine_notice, live_notice
from .interrupted import interrupted_line
from .model import sha12
from .render import headline_markdown, title_markdown
from .sections import results_rows, short_words, summary_counts

__all__ = ["render_terminal", "terminal_width", "MAX_CELL_LINES", "PIPE_WIDTH"]

MAX_CELL_LINES = 20   # non-ok cells listed on the terminal; the rest are in the report


# a pipe or a file (a CI log, `| tee`) is read in a window too: 120 columns (issue 50: an
# auto run's one table was 730 wide there)
PIPE_WIDTH = 120


def terminal_width() -> int:
    """The columns a line or a table may take: ``COLUMNS`` when set, else the terminal's
    width when stdout is one, else ``PIPE_WIDTH``."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else PIPE_WIDTH


def render_terminal(records: RecordsIn,
                    manifests: list[dict] | list[RunManifest] | None = None, *,
                    width: int | None = None, wrap: int | None | bool = True) -> str:
    """The short plain-text report of ``records`` (and their manifests). ``width``: the
    columns a results table may take (``terminal_width()``); a table of several
    configurations wider than that is split, one table per configuration. ``wrap``: the
    columns prose lines wrap in (True: ``width``; None: none, one line each)."""
    wrap = width if wrap is True else (wrap or None)
    manifests = typed_manifests(manifests)
    if not records:
        return "No records: nothing was measured."
    recs, _ = latest_records(typed(records))
    title = inline_to_plain(title_markdown(recs))
    out = [*wrap_prose(title, wrap), "=" * min(display_width(title), wrap or 100, 100), ""]
    for notice in (live_notice(recs), engine_notice(recs)):
        if notice:
            out += [*wrap_prose(inline_to_plain(notice), wrap), ""]
    out += wrap_prose(inline_to_plain(headline_markdown(recs)) + ".", wrap)
    for line in (interrupted_line(manifests, recs), agreement_line(recs)):
        if line:
            out += wrap_prose(inline_to_plain(line), wrap)
    out.append("")
    for case, cds in case_groups(recs):
        out += _group(case, cds, width, wrap)
    out += _baseline(manifests)
    return "\n".join(out).rstrip() + "\n"


def _baseline(manifests: list[RunManifest]) -> list[str]:
    """What a --baseline gate failed on, cell by cell (the manifest's ``baseline``)."""
    from ..publish.gate import gate_lines
    out: list[str] = []
    for m in manifests:
        if isinstance(m.baseline, BaselineBlock):
            out += ["Baseline", "--------", *gate_lines(m.baseline), ""]
    return out


def _group(case: str | None, cds: list, width: int | None = None,
           wrap: int | None = None) -> list[str]:
    """One configuration group (a --prompts case, or the whole run): the lines per
    configuration, the table (split per configuration past ``width``), the non-ok cells."""
    out = []
    if case is not None:
        out += [f"Case {case}", ""]
    for cd in cds:
        pred = predict_bug_b(cd)
        out += wrap_prose(inline_to_plain(f"{cd.label}{case_suffix(case)}: {summary_counts(cd)}. "
                                     f"Bug B rule: {pred.why}; {agreement(cd, pred)}."),
                         wrap, "  ")
    short, corner = short_words(cds)
    notes = Footnotes()
    out += ["", *_tables(cds, notes, short, corner, width), ""]
    if notes.items:
        out.append("Not ok:")
        for item in notes.items[:MAX_CELL_LINES]:
            out += wrap_prose("  " + _cell_line(item, short if len(cds) > 1 else None), wrap,
                              "      ")
        if len(notes.items) > MAX_CELL_LINES:
            out.append(f"  ... and {len(notes.items) - MAX_CELL_LINES} more (the report "
                       "file lists them all)")
        out.append("")
    return out


def _tables(cds: list, notes: Footnotes, short: dict[str, Phrase], corner: Phrase,
            width: int | None) -> list[str]:
    """The results table (the report's rows, ``sections.results_rows``, as plain text);
    past ``width`` columns (the README's bug/fix matrix is 327 wide) one table per
    configuration, under its short label, so each fits a terminal."""
    table = _plain_table(*results_rows(cds, notes, full=False, short=short, corner=corner))
    if width is None or max(map(display_width, table.splitlines())) <= width:
        return [table]
    if len(cds) < 2:   # one configuration: the title names it, the corner need not
        rows = results_rows(cds, notes, full=False,
                            short={cds[0].config_id: Phrase.of()}, corner=Phrase.of())
        return [_plain_table(*rows, width=width)]
    out: list[str] = []
    for cd in cds:
        rows = results_rows([cd], notes, full=False, short={cd.config_id: Phrase.of()},
                            corner=Phrase.of())
        out += [short[cd.config_id].plain() + ":", _plain_table(*rows, width=width), ""]
    return out[:-1]


def _plain_table(header: list[Phrase], rows: list[list[Phrase]], width: int | None = None) -> str:
    """The table aligned; past ``width`` its widest column's cells are cut (their footnote
    mark kept: the "Not ok" list below says the rest), as a history's long invalid reason
    would otherwise widen one configuration's table past a terminal."""
    head, body = [h.plain() for h in header], [[c.plain() for c in r] for r in rows]
    table = align_table(head, body)
    if width is None or max(map(display_width, table.splitlines())) <= width or not body:
        return table
    cols = list(zip(head, *body))
    widths = [max(map(display_width, col)) for col in cols]
    wide = widths.index(max(widths))
    room = max(MIN_CELL, width - (sum(widths) - widths[wide]) - 2 * (len(widths) - 1))
    return align_table(head, [[_cut(c, room) if i == wide else c for i, c in enumerate(r)]
                              for r in body])


MIN_CELL = 24   # a cut cell keeps at least this many columns
_MARK = re.compile(r"( †\d+)$")


def _cut(cell: str, room: int) -> str:
    """``cell`` in ``room`` columns: its start, an ellipsis, and its footnote mark."""
    if display_width(cell) <= room:
        return cell
    m = _MARK.search(cell)
    mark = m.group(1) if m else ""
    return cell[:max(room - len(mark) - 1, 1)].rstrip() + "…" + mark


def _visible(text: str) -> str:
    """Untrusted text (a server's log line) with its control characters shown, not run
    by the terminal."""
    return "".join(repr(ch)[1:-1] if unicodedata.category(ch) == "Cc" else ch for ch in text)


def _cell_line(item: Footnote, short: dict[str, str] | None) -> str:
    """One non-ok cell (or identical cells): where, what, why, and the answer's start."""
    r = item.record
    where = (short[item.cd.config_id].plain() + " " if short else "")
    where += (f"residue {fmt_ranges(item.residues)} "
              f"{', '.join(sorted(item.phases, key=phase_key))}")
    answer = r.answer or ""
    said = ("content: null" if r.content_was_null and not answer
            else repr(answer[:EXCERPT_CHARS] + ("…" if len(answer) > EXCERPT_CHARS else "")))
    parts = [f"{item.mark} {where}: {r.verdict}", _visible(failure_gist(r))]
    if r.sha1:
        parts.append(f"sha1 {sha12(r)}")
    if r.cached_tokens is not None:
        parts.append(f"cached {r.cached_tokens} / tail {r.computed_tail}")
    if r.verdict not in UNANSWERED:
        parts.append(f"answer {said}")
    return "; ".join(p for p in parts if p)
