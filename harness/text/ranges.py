"""Residue sets as a reader writes them: ``0–3, 5–7`` (the thread's en dash)."""
from __future__ import annotations

from typing import Iterable

__all__ = ["fmt_ranges", "residues_phrase"]


def fmt_ranges(values: Iterable[int]) -> str:
    """``[0,1,2,3,5,6,7]`` -> ``0–3, 5–7``; two neighbours stay a list (``4, 5``)."""
    vals = sorted(set(int(v) for v in values))
    out, i = [], 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        if j == i:
            out.append(str(vals[i]))
        elif j == i + 1:
            out.extend([str(vals[i]), str(vals[j])])
        else:
            out.append(f"{vals[i]}–{vals[j]}")
        i = j + 1
    return ", ".join(out)


def residues_phrase(values: Iterable[int]) -> str:
    vals = sorted(set(values))
    return ("residue " if len(vals) == 1 else "residues ") + fmt_ranges(vals)
