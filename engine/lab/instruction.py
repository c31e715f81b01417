"""How the lab copy model reads a user's instruction: which lines of the message are the
document and how many of them to copy (``parse_instruction``). A text rule, not a layer: the
model's instruction reader (``model.CopyModel.read_instruction``) runs it over the last user
turn as its attention pass reads it back from the KV slots. docs/lab-engine.md lists the
prompt shapes it understands.
"""
from __future__ import annotations

import re

NO_LIMIT = 1 << 30

NUMBER_WORDS = {w: i + 1 for i, w in enumerate(
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty".split())}
_NUM = r"(\d+|" + "|".join(NUMBER_WORDS) + r")"
# "the first 3 lines", "the opening two lines", "3 first lines", "first twenty lines"
_COUNT_BEFORE = re.compile(_NUM + r"(?:[\s\-]+[A-Za-z'\-]+){0,3}?[\s\-]+lines?\b", re.I)
# "lines 1-3", "lines 1 to 3", "lines one through three"
_RANGE = re.compile(r"\blines?\s+(?:1|one)\s*(?:-|\u2013|to|through|thru)\s*" + _NUM + r"\b", re.I)
_SINGLE_LINE = re.compile(r"\b(first|opening|top|initial|1st)\s+line\b", re.I)
_VERB = re.compile(r"\b(reproduce|copy|repeat|write|output|print|return|give|transcribe|echo|"
                   r"type|quote|recite|show|list|provide|reply|respond|duplicate)\b", re.I)
_FENCE = re.compile(r"^\s*(```.*|-{3,}\s*)$")
# A line that names the document, not part of it (issue 50: the lab copied "Document:"),
# of at most 5 words: "Document:", "### Passage", "<document>", "[TEXT]", "DOCUMENT"
_LABEL = re.compile(r"^\s*(?:#{1,6}\s*)?[A-Za-z][\w '\-()/]{0,40}:\s*$|^\s*#{1,6}\s+\S.{0,60}$"
                    r"|^\s*</?\s*[A-Za-z][\w\-]*(?:\s[^>]*)?>\s*$|^\s*\[[A-Za-z][\w \-]{0,40}\]\s*$"
                    r"|^\s*[A-Z][A-Z \-]{1,30}\s*$")


def _paragraphs(blank: list[bool]) -> list[tuple[int, int]]:
    """(first, end) line of each run of non-blank lines."""
    paras: list[tuple[int, int]] = []
    i = 0
    while i < len(blank):
        if blank[i]:
            i += 1
            continue
        j = i
        while j < len(blank) and not blank[j]:
            j += 1
        paras.append((i, j))
        i = j
    return paras


def _count_of(line: str) -> int | None:
    if "line" not in line.lower():
        return None
    m = _RANGE.search(line) or _COUNT_BEFORE.search(line)
    if m:
        w = m.group(1).lower()
        return int(w) if w.isdigit() else NUMBER_WORDS[w]
    if _SINGLE_LINE.search(line):
        return 1
    return None


def _instruction_lines(lines: list[str], paras: list[tuple[int, int]]) -> list[tuple]:
    """Each line of the first or last paragraph that names a count: (score, line index,
    count, at_top, its paragraph), the higher score the likelier the instruction."""
    candidates = []  # (score, line index, count, at_top)
    for pi, (a, b) in enumerate(paras):
        if pi not in (0, len(paras) - 1):
            continue
        for li in range(a, b):
            n = _count_of(lines[li])
            if n is None:
                continue
            score = 2 if _VERB.search(lines[li]) else 0
            low = lines[li].lower()
            at_top = pi == 0 and not (pi == len(paras) - 1 and
                                      re.search(r"\b(above|preceding|previous)\b", low))
            if re.search(r"\b(below|following|follows|next)\b", low) and pi == 0:
                score += 1
            if re.search(r"\b(above|preceding|previous)\b", low) and pi == len(paras) - 1:
                score += 1
            candidates.append((score, li, n, at_top, (a, b)))
    return candidates


def parse_instruction(lines: list[str]) -> tuple[int, int, int]:
    """(first doc line, end doc line (exclusive), count) for a user message split in lines.

    The instruction is a line with a count (digits or one..twenty) near "line(s)", in the
    first or last paragraph; the document is the rest of the message, without surrounding
    blank lines and ``` / --- fences. No instruction: the whole message, no line limit.
    """
    blank = [not ln.strip() for ln in lines]
    paras = _paragraphs(blank)
    if not paras:
        return 0, 0, 0
    candidates = _instruction_lines(lines, paras)
    if not candidates:
        first, end = 0, len(lines)
        count = NO_LIMIT
    else:
        score, li, count, at_top, (a, b) = max(candidates, key=lambda c: (c[0], -c[1]))
        if at_top:
            # "Copy the first 2 lines of this text:" directly followed by the text
            first = li + 1 if (lines[li].rstrip().endswith(":") and li + 1 < b) else b
            end = len(lines)
        else:
            first = 0
            end = li if li > a else a
    skip = lambda k: blank[k] or bool(_FENCE.match(lines[k])) or _is_label(lines[k])  # noqa: E731
    while first < end and skip(first):
        first += 1
    while end > first and skip(end - 1):
        end -= 1
    return first, end, count


def _is_label(line: str) -> bool:
    """A header or closing line around the document (``_LABEL``), never its text."""
    return len(line.split()) <= 5 and bool(_LABEL.match(line))
