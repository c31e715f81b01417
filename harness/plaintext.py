"""The report as a terminal shows it: the markdown's own syntax taken out.

The markdown (``reports/<run-id>.md``, ``-o FILE``, a GitHub comment) is escaped so that
GitHub renders untrusted text as exactly that text: ``FULL\\_AND\\_PIECEWISE``, ``&lt;``,
a zero-width joiner after ``@`` and ``#``. On a terminal those escapes are noise, so what
``sweep`` prints is this plain version: no backslash escapes, no code-span backticks, no
``**``, entities decoded, headings underlined, HTML comments and code fences dropped.
Tables keep their ``|`` columns, which read fine as text.
"""
from __future__ import annotations

import re

__all__ = ["markdown_to_plain", "inline_to_plain"]

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


def markdown_to_plain(markdown: str) -> str:
    """A whole report as plain text."""
    lines: list[str] = []
    in_fence = False
    for line in markdown.split("\n"):
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
