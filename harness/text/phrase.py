"""A sentence kept as structure: literal words, code spans, quoted values, emphasis.

The Bug B rule (``harness.judge.bugb``) says why it predicts what it predicts as a ``Phrase``,
and the report's results table is built of them (``report/cells.py``, ``report/sections.py``);
each reader renders them its own way: the report as markdown (``Phrase.markdown``: a value
escaped, a code span fenced, a bad cell bold), the dry run and the terminal as plain text
(``Phrase.plain``: a value as one line, nothing to take out again), so nothing is rendered
to markdown only to be un-rendered again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .ghmarkdown import bold, code, escape_text, one_line

__all__ = ["Phrase", "Code", "Text", "Strong", "Emph", "plural"]


def plural(n: int, word: str) -> str:
    """``1 cell``, ``2 cells``: a count and its noun (issue 50: "1 cells")."""
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Code:
    """A code span: a flag, a mode, a name the user types."""
    value: str


@dataclass(frozen=True)
class Text:
    """A value from outside (a release line, a patch status, a server's log line): shown
    exactly as it is, on one line; ``limit`` caps it (``ghmarkdown.cap``)."""
    value: str
    limit: int | None = None


@dataclass(frozen=True)
class Strong:
    """What must stand out (a bad cell): bold in markdown, as it is in plain text."""
    phrase: "Phrase"


@dataclass(frozen=True)
class Emph:
    """What nothing judged (an open cell): italic in markdown, as it is in plain text."""
    phrase: "Phrase"


Part = Union[str, Code, Text, Strong, Emph, "Phrase"]


@dataclass(frozen=True)
class Phrase:
    parts: tuple[Union[str, Code, Text, Strong, Emph], ...]

    @classmethod
    def of(cls, *parts: Part) -> "Phrase":
        """Literal strings, ``Code`` / ``Text`` / ``Strong`` / ``Emph`` values and phrases,
        in order."""
        flat: list[Union[str, Code, Text, Strong, Emph]] = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, Phrase) else [p])
        return cls(tuple(flat))

    def markdown(self) -> str:
        return "".join(_markdown(p) for p in self.parts)

    def plain(self) -> str:
        return "".join(_plain(p) for p in self.parts)

    def __bool__(self) -> bool:
        return any(self.parts)


def _markdown(p) -> str:
    if isinstance(p, Code):
        return code(p.value)
    if isinstance(p, Text):
        return escape_text(p.value, limit=p.limit)
    if isinstance(p, Strong):
        return bold(p.phrase.markdown())
    if isinstance(p, Emph):
        inner = p.phrase.markdown()
        return f"*{inner}*" if inner else inner
    return p


def _plain(p) -> str:
    if isinstance(p, Code):
        return str(p.value)
    if isinstance(p, Text):
        return one_line(p.value, limit=p.limit)
    if isinstance(p, (Strong, Emph)):
        return p.phrase.plain()
    return p
