"""GitHub-safe markdown pieces for reports: escaping of untrusted text, code spans, tables.

Model answers, server log lines and anything else a server sent are untrusted: pasted
into a GitHub issue they could break a table (``|``), open a code span (backtick), inject
HTML (``<script>``), ping people (``@someone``) or cross-link issues (``#1``, ``GH-1``).
GitHub resolves mentions and issue references on the *text nodes of the rendered HTML*,
so a backslash or an HTML entity does not stop them (``\\#1`` and ``&#35;1`` both render to
the text ``#1``, which is then linked). What does stop them is a character between the
sigil and the name that is not part of a name: we insert U+200D (zero-width joiner), which
is invisible in the rendered page.
"""
from __future__ import annotations

import html
import re
import unicodedata
from typing import Iterable, Sequence

__all__ = ["ZWJ", "ELLIPSIS", "DEFAULT_CAP", "cap", "neutralise", "one_line", "escape_text", "code",
           "fence", "bold", "table", "details"]

ZWJ = "\u200d"
ELLIPSIS = "…"
DEFAULT_CAP = 80

# Backslash-escapable ASCII punctuation that means something to GFM inline parsing.
# (``|`` is the table-cell separator; GFM honours ``\|`` inside table cells, even in code.)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~$])")
# Bidi controls can reorder what a reader sees ("trojan source"): shown, never obeyed.
_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
# @mention: GitHub names are [A-Za-z0-9-]; teams are org/team. Also catches emails' @ (harmless).
_MENTION = re.compile(r"@(?=[A-Za-z0-9])")
# Issue / PR references: #123, GH-123, owner/repo#123.
_ISSUE_HASH = re.compile(r"#(?=\d)")
_GH_REF = re.compile(r"\b(GH)-(?=\d)", re.IGNORECASE)
# URL autolinks (GFM extension): http://, https://, www.
_URL = re.compile(r"(?i)\b(https?|ftp)(?=://)|\b(www)(?=\.)")


def _visible_control(ch: str) -> str:
    """A control / bidi character made visible, e.g. ``\\x1b`` -> ``\\x1b`` as text."""
    cp = ord(ch)
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


def cap(text: str, limit: int = DEFAULT_CAP) -> str:
    """At most ``limit`` characters of ``text``; says how much was cut."""
    if text is None:
        return ""
    if limit <= 0 or len(text) <= limit:
        return text
    return f"{text[:limit]}{ELLIPSIS} (+{len(text) - limit} chars)"


def neutralise(text: str) -> str:
    """Break @mentions, #123 / GH-123 references and URL autolinks with a zero-width joiner."""
    text = _MENTION.sub("@" + ZWJ, text)
    text = _ISSUE_HASH.sub("#" + ZWJ, text)
    text = _GH_REF.sub(lambda m: m.group(1) + "-" + ZWJ, text)
    text = _URL.sub(lambda m: (m.group(1) or m.group(2)) + ZWJ, text)
    return text


def one_line(text: str | None, *, limit: int | None = None) -> str:
    """Untrusted text as one line of plain text (a terminal's): capped like
    ``escape_text``, newlines shown as ``⏎``, control and bidi characters shown as
    escapes; nothing of markdown."""
    if text is None:
        return ""
    text = str(text)
    if limit is not None:
        text = cap(text, limit)
    return "".join(_one_char(ch) for ch in text.replace("\r\n", "\n"))


def _one_char(ch: str) -> str:
    if ch in "\r\n":
        return " ⏎ "
    if ch == "\t":
        return " "
    if ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co"):
        # includes a ZWJ from the input, which would look like one of ours
        return _visible_control(ch)
    return ch


def escape_text(text: str | None, *, limit: int | None = None) -> str:
    """Untrusted text -> inline markdown that renders as exactly that text (one line).

    Safe inside a GFM table cell: ``|`` escaped, newlines shown as ``⏎``, HTML escaped as
    entities, markdown punctuation backslash-escaped, mentions/references neutralised,
    control and bidi characters shown as escapes. ``limit`` caps the raw text first (so a
    cut never lands inside an escape)."""
    if text is None:
        return ""
    text = _MD_SPECIAL.sub(r"\\\1", one_line(text, limit=limit))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return neutralise(text)


def code(text: str) -> str:
    """A code span for harness-made text (labels, sha1s, finish reasons); ``|`` escaped so
    it survives a table cell, and a fence longer than any backtick run inside."""
    text = str(text).replace("\n", " ").replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fence(text: str, lang: str = "") -> str:
    """A fenced code block that no line of ``text`` can close."""
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    f = "`" * max(3, longest + 1)
    return f"{f}{lang}\n{text}\n{f}"


def details(summary: str, body: str) -> str:
    """A folded block: ``summary`` (plain words, HTML-escaped) shown, ``body`` (markdown:
    blank lines around it so GitHub renders it) behind a click (issue 50: what a maintainer
    needs first stays open, the configuration, reruns, timing and provenance fold)."""
    shown = html.escape(summary, quote=False)
    return f"<details><summary>{shown}</summary>\n\n{body}\n\n</details>"


def bold(text: str) -> str:
    return f"**{text}**" if text else text


def table(header: Sequence[str], rows: Iterable[Sequence[str]],
          align: Sequence[str] | None = None) -> str:
    """A GFM pipe table from already-escaped cells (tabulate's ``github`` format).

    Cells must already be markdown (escaped where untrusted); tabulate adds no escaping of
    its own, so we turn off its number parsing to keep ``794/794`` and sha1s verbatim."""
    # tabulate directly, not through pandas: importing pandas (and numpy) cost every sweep
    # process ~0.4 s of CPU for the one report table it rendered
    from tabulate import tabulate

    width = len(header)
    cells = [[_cell(c) for c in r] + ["–"] * (width - len(r)) for r in rows]
    text = tabulate(cells, headers=[str(h) for h in header], tablefmt="github",
                    disable_numparse=True, colalign=align)
    return _tidy_github_table(text)


def _cell(value) -> str:
    """A cell as text; an empty or missing one is an en dash, which a careless reader
    cannot take for a short row."""
    if value is None or (isinstance(value, float) and value != value):  # None, NaN
        return "–"
    return str(value) or "–"


def _tidy_github_table(text: str) -> str:
    """tabulate pads cells to a common width: fine, but its separator row must stay valid
    GFM (``|---|``) and no cell may contain a raw newline."""
    lines = text.splitlines()
    return "\n".join(line.rstrip() for line in lines)
