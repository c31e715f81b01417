"""The report as a terminal shows it: the markdown's own syntax taken out.

The markdown (``reports/<run-id>.md``, ``-o FILE``, a GitHub comment) is escaped so that
GitHub renders untrusted text as exactly that text: ``FULL\\_AND\\_PIECEWISE``, ``&lt;``,
a zero-width joiner after ``@`` and ``#``. On a terminal those escapes are noise, so what
``sweep`` prints is this plain version: no backslash escapes, no code-span backticks, no
``**``, entities decoded, headings underlined, HTML comments and code fences dropped.
A table is re-laid out: each cell made plain first, then padded to the column's width
as a terminal shows it (``display_width``), so markup taken out never shifts a column.
"""
from __future__ import annotations

import re
import textwrap
import unicodedata
from typing import Sequence

__all__ = ["markdown_to_plain", "inline_to_plain", "display_width", "align_table",
           "wrap_prose"]


def wrap_prose(line: str, width: int | None, indent: str = "") -> list[str]:
    """A prose line in ``width`` columns, continued under ``indent`` (a word longer than
    the width, a path, stays whole; issue 50: summary lines of 730 columns); a table is
    never wrapped (the terminal splits it per configuration)."""
    if width is None or display_width(line) <= width:
        return [line]
    return textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [line]

_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_ESCAPE = re.compile(r"\\([\\`*_\[\]|~$#<>!{}()+.-])")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_COMMENT = re.compile(r"^\s*<!--.*-->\s*$")
_EMPHASIS = re.compile(r"(?<![\\*\w])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![*\w])")
_ZWJ = "\u200d"


def _text_to_plain(text: str) -> str:
    text = text.replace("**", "")
    text = _EMPHASIS.sub(r"\1", text)
    text = _ESCAPE.sub(r"\1", text)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return text.replace(_ZWJ, "")


def inline_to_plain(line: str) -> str:
    """One line of inline markdown as plain text."""
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(line):
        out.append(_text_to_plain(line[pos:m.start()]))
        body = m.group(2)
        if len(body) > 2 and body.startswith(" ") and body.endswith(" "):
            body = body[1:-1]
        out.append(body.replace("\\|", "|"))
        pos = m.end()
    out.append(_text_to_plain(line[pos:]))
    return "".join(out)


def display_width(text: str) -> int:
    """Columns ``text`` takes on a terminal (a wide CJK character two, a combining mark
    or a zero-width joiner none)."""
    width = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def align_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An aligned plain-text table of plain cells, each padded to its column's width."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    n = max(len(r) for r in cells)
    cells = [r + [""] * (n - len(r)) for r in cells]
    widths = [max(display_width(r[i]) for r in cells) for i in range(n)]

    def line(row: list[str]) -> str:
        return "  ".join(c + " " * (w - display_width(c)) for c, w in zip(row, widths)).rstrip()

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths),
                      *(line(r) for r in cells[1:])])


_SEPARATOR = re.compile(r"^\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*$")


def _split_row(line: str) -> list[str]:
    """The cells of a pipe-table row: split on ``|`` outside code spans and not escaped."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    cells, cur, i, tick = [], "", 0, 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            cur += body[i:i + 2]
            i += 2
            continue
        if ch == "`":
            run = len(body[i:]) - len(body[i:].lstrip("`"))
            tick = 0 if tick == run else (run if not tick else tick)
            cur += body[i:i + run]
            i += run
            continue
        if ch == "|" and not tick:
            cells.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    cells.append(cur.strip())
    return cells


def _table(block: list[str]) -> list[str]:
    rows = [_split_row(ln) for ln in block if not _SEPARATOR.match(ln.strip())]
    plain = [[inline_to_plain(c) for c in row] for row in rows]
    return align_table(plain[0], plain[1:]).split("\n")


def markdown_to_plain(markdown: str) -> str:
    """A whole report as plain text."""
    lines: list[str] = []
    in_fence = False
    source = markdown.split("\n")
    i = 0
    while i < len(source):   # a pipe table becomes an aligned plain one
        if not in_fence and source[i].lstrip().startswith("|"):
            j = i
            while j < len(source) and source[j].lstrip().startswith("|"):
                j += 1
            lines += _table(source[i:j])
            i = j
            continue
        line = source[i]
        i += 1
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            lines.append(line)
            continue
        if _COMMENT.match(line):
            continue
        h = _HEADING.match(line)
        if h:
            title = inline_to_plain(h.group(2))
            lines.append(title)
            if len(h.group(1)) <= 2:
                lines.append(("=" if len(h.group(1)) == 1 else "-") * len(title))
            continue
        lines.append(inline_to_plain(line))
    return "\n".join(lines)
