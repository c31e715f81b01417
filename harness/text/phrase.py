"""A sentence kept as structure: literal words, code spans and quoted values.

The Bug B rule (``harness.judge.bugb``) says why it predicts what it predicts as a ``Phrase``;
each reader renders it its own way: the report as markdown (``Phrase.markdown``: a value
escaped, a code span fenced), the dry run and the terminal as plain text
(``Phrase.plain``), so nothing is rendered to markdown only to be un-rendered again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .ghmarkdown import code, escape_text

__all__ = ["Phrase", "Code", "Text"]


@dataclass(frozen=True)
class Code:
    """A code span: a flag, a mode, a name the user types."""
    value: str


@dataclass(frozen=True)
class Text:
    """A value from outside (a release line, a patch status): shown exactly as it is."""
    value: str


Part = Union[str, Code, Text, "Phrase"]


@dataclass(frozen=True)
class Phrase:
    parts: tuple[Union[str, Code, Text], ...]

    @classmethod
    def of(cls, *parts: Part) -> "Phrase":
        """Literal strings, ``Code`` / ``Text`` values and phrases, in order."""
        flat: list[Union[str, Code, Text]] = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, Phrase) else [p])
        return cls(tuple(flat))

    def markdown(self) -> str:
        return "".join(code(p.value) if isinstance(p, Code) else escape_text(p.value)
                       if isinstance(p, Text) else p for p in self.parts)

    def plain(self) -> str:
        return "".join(p if isinstance(p, str) else str(p.value) for p in self.parts)

    def __bool__(self) -> bool:
        return any(self.parts)
