"""The results table's columns after its phase cells, declared once: one ``Column`` per
entry of ``COLUMNS``, one cell per configuration and residue. ``sections.results_rows``
reads the table (the markdown report's pipe table and the terminal's aligned one,
``terminal.py``, are both its rows: header, cells, a folded row's cell), and the legend
under "## Results" (``render.py``) says each column's ``legend``. Adding a column is one
entry here; none is declared yet, so every table is its phase cells alone."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..text.phrase import Phrase, Text
from .model import ConfigData

__all__ = ["Column", "COLUMNS", "legend"]

Value = float | int | None


@dataclass(frozen=True)
class Column:
    header: str                                    # after a configuration's short label when several
    legend: str                                    # what the legend says the column is
    value: Callable[[ConfigData, int], Value]      # one configuration at one residue
    fmt: Callable[[float | int], str] = str        # one value as the cell shows it

    def cell(self, value: Value) -> Phrase:
        return Phrase.of("–" if value is None else Text(self.fmt(value)))

    def folded(self, values: list[Value]) -> Phrase:
        """The cell of a folded row (several residues): the one value, or lowest–highest."""
        known = [v for v in values if v is not None]
        if not known or min(known) == max(known):
            return self.cell(known[0] if known else None)
        return Phrase.of(self.cell(min(known)), "–", self.cell(max(known)))


# The declared columns, in table order (each one cell per configuration).
COLUMNS: tuple[Column, ...] = ()


def legend() -> str:
    """What the legend adds for the declared columns: `` `tok/step`: ...`` ("" for none)."""
    return "".join(f" `{c.header}`: {c.legend}." for c in COLUMNS)
