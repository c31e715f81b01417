"""A report as GitHub comment bodies: one when it fits GitHub's 65,536-character limit,
else parts (``<!-- residue-lab:M part 2/3 -->``) cut at section, table and code-block
boundaries, never inside a table row, a continued table repeating its header, the non-ok
cells first (part 1: the report's title and headline, then the non-ok cells under
``## Non-ok cells``, then the rest in the report's order). Text in, text out: posting them
is ``github_rest.py``'s."""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["COMMENT_LIMIT", "DEFAULT_MARKER", "BAD_CELLS_HEADING", "Block", "parse_blocks",
           "mark_bad_blocks", "marker_line", "comment_bodies"]

COMMENT_LIMIT = 65_536           # GitHub's maximum comment body, in characters
HEADER_ROOM = 300                # the marker line and part heading, reserved in each part
DEFAULT_MARKER = "sweep-report"
BAD_CELLS_HEADING = "## Non-ok cells"

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:\s|$)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_TABLE_DELIM = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
# The non-ok part of a report: a section under such a heading, or (report/cells.py today) a
# paragraph that starts so, with the table that follows it.
_BAD_HEADING = re.compile(r"^#{1,6}\s+(non-ok|not[- ]ok|bad cells|broken|regressions?)\b", re.I)
_BAD_LEAD = re.compile(r"^(non-ok cells|not-ok cells|regressions)\b", re.I)


@dataclass
class Block:
    """A markdown block that is never cut in the middle: a heading, a table, a fenced code
    block, or a paragraph / list (consecutive non-blank lines)."""
    kind: str                     # "heading" | "table" | "code" | "text"
    lines: list[str]
    level: int = 0                # heading level
    bad: bool = False             # part of the non-ok cells

    def text(self) -> str:
        return "\n".join(self.lines)


def parse_blocks(markdown: str) -> list[Block]:
    lines = markdown.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:  # a fence runs to its closing fence (same character, at least as long)
            mark = fence.group(1)
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(mark[0] * len(mark)):
                j += 1
            blocks.append(Block("code", lines[i:j + 1]))
            i = j + 1
            continue
        heading = _HEADING.match(line)
        if heading:
            blocks.append(Block("heading", [line], level=len(heading.group(1))))
            i += 1
            continue
        if line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_DELIM.match(lines[i + 1]):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            blocks.append(Block("table", lines[i:j]))
            i = j
            continue
        j = i
        while (j < len(lines) and lines[j].strip() and not _FENCE.match(lines[j])
               and not _HEADING.match(lines[j])
               and not (j > i and lines[j].lstrip().startswith("|"))):
            j += 1
        blocks.append(Block("text", lines[i:j]))
        i = j
    return blocks


def mark_bad_blocks(blocks: list[Block]) -> None:
    """Flag the non-ok cells: a section under a non-ok heading (to the next heading of the
    same or a higher level), or a 'Non-ok cells ...' paragraph and the table after it."""
    section_level = 0
    for i, b in enumerate(blocks):
        if b.kind == "heading":
            if section_level and b.level <= section_level:
                section_level = 0
            if not section_level and _BAD_HEADING.match(b.lines[0]):
                section_level = b.level
        if section_level:
            b.bad = True
        elif b.kind == "text" and _BAD_LEAD.match(b.lines[0]):
            b.bad = True
            if i + 1 < len(blocks) and blocks[i + 1].kind == "table":
                blocks[i + 1].bad = True


def _frame(b: Block) -> tuple[list[str], list[str], list[str]]:
    """(head, body, tail) of a block: what every piece of it repeats (a table's header and
    delimiter rows, a code block's fences) around the lines that can be spread over pieces."""
    if b.kind == "table":
        return b.lines[:2], b.lines[2:], []
    if b.kind == "code":
        fence = b.lines[0].strip()[:3]
        closed = len(b.lines) > 1 and b.lines[-1].strip().startswith(fence)
        return b.lines[:1], (b.lines[1:-1] if closed else b.lines[1:]), [fence]
    return [], b.lines, []


def _cut_long_lines(b: Block, limit: int) -> Block:
    """A line that could never fit a comment is cut, saying so (a table row stays a row)."""
    def cut(line: str) -> str:
        if len(line) <= limit:
            return line
        end = " |" if b.kind == "table" else ""
        return line[:limit - 60] + f" … (line cut: {len(line) - limit + 60} chars){end}"
    return Block(b.kind, [cut(x) for x in b.lines], b.level, b.bad)


def _take(b: Block, room: int) -> tuple[Block | None, Block | None]:
    """The longest leading piece of ``b`` that fits ``room`` characters (whole lines, the
    frame repeated), and what is left of ``b`` (None when nothing is)."""
    if len(b.text()) <= room:
        return b, None
    head, body, tail = _frame(b)
    size = sum(len(x) + 1 for x in head + tail)
    n = 0
    while n < len(body) and size + len(body[n]) + 1 <= room:
        size += len(body[n]) + 1
        n += 1
    if n == 0:
        return None, b
    rest = Block(b.kind, head + body[n:] + tail, b.level, b.bad) if n < len(body) else None
    return Block(b.kind, head + body[:n] + tail, b.level, b.bad), rest


def _order_bad_first(blocks: list[Block]) -> list[Block]:
    """Title and headline, then the non-ok cells under their heading, then the rest, with
    a pointer where the non-ok cells were."""
    bad = [b for b in blocks if b.bad]
    if not bad:
        return blocks
    first_section = next((i for i, b in enumerate(blocks) if b.kind == "heading" and b.level >= 2),
                         len(blocks))
    preamble = [b for b in blocks[:first_section] if not b.bad]
    if not (bad[0].kind == "heading"):
        bad = [Block("heading", [BAD_CELLS_HEADING], level=2, bad=True)] + bad
    rest: list[Block] = []
    pointer_due = True
    for b in blocks[first_section:]:
        if b.bad:
            if pointer_due:
                rest.append(Block("text", ["*(The non-ok cells are listed first, in part 1.)*"]))
                pointer_due = False
            continue
        rest.append(b)
    return preamble + bad + rest


def _pack(blocks: list[Block], budget: int) -> list[str]:
    """Blocks into parts of at most ``budget`` characters, in order, each block split only
    between its lines (a table between rows), a heading kept with what follows it."""
    queue = [_cut_long_lines(b, budget // 2) for b in blocks]
    parts: list[list[str]] = []
    cur: list[str] = []
    size = 0
    while queue:
        b = queue.pop(0)
        room = budget - size - (2 if cur else 0)
        need = len(b.text())
        if b.kind == "heading" and queue:   # never a heading alone at the end of a part
            need += 2 + min(len(queue[0].text()), budget // 8)
        piece, rest = (b, None) if need <= room else \
            (_take(b, room) if b.kind != "heading" else (None, b))
        if piece is None:
            if not cur:                      # cannot happen after _cut_long_lines; be safe
                raise ValueError("a markdown block does not fit an empty comment")
            parts.append(cur)
            cur, size = [], 0
            queue.insert(0, b)
            continue
        size += len(piece.text()) + (2 if cur else 0)
        cur.append(piece.text())
        if rest is not None:
            parts.append(cur)
            cur, size = [], 0
            queue.insert(0, rest)
    if cur:
        parts.append(cur)
    return ["\n\n".join(p) + "\n" for p in parts]


def marker_line(marker: str, part: int = 0, total: int = 0) -> str:
    return (f"<!-- residue-lab:{marker} part {part}/{total} -->" if total
            else f"<!-- residue-lab:{marker} -->")


def comment_bodies(report: str, marker: str = DEFAULT_MARKER, *,
                   limit: int = COMMENT_LIMIT) -> list[str]:
    """The comment bodies for ``report``: one when it fits under ``limit`` (the report as
    it is, after the marker line), else several, non-ok cells first (module docstring)."""
    single = marker_line(marker) + "\n" + report
    if len(single) <= limit:
        return [single]
    budget = limit - HEADER_ROOM
    blocks = parse_blocks(report)
    mark_bad_blocks(blocks)
    parts = _pack(_order_bad_first(blocks), budget)
    n = len(parts)
    bodies = []
    for i, text in enumerate(parts, 1):
        note = ("non-ok cells first; the rest of the report follows" if i == 1 and n > 1
                else "continued")
        bodies.append(f"{marker_line(marker, i, n)}\n*Residue sweep report, part {i} of {n}"
                      f" ({note}).*\n\n{text}")
    assert all(len(b) <= limit for b in bodies), "a comment part exceeds the limit"
    return bodies
