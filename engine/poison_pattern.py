"""The poison pattern (issue 32), one definition for every engine that fills: the lab's
state slots (``engine/lab/poison.py``, numpy) and a vLLM worker's KV pool
(``engine/vllm/poison.py``, torch). Integer arithmetic only, on whatever array library the
caller hands in, so the same pattern name gives the same values on every machine."""
from __future__ import annotations

from typing import Any

__all__ = ["PATTERNS", "MODE_REGIONS", "AUDIT_EVERY", "RESTORE_HOWS", "seed_of", "hash24", "parse_regions"]

PATTERNS = {"A": 0x5EED, "B": 0xB0B5}
# what `--poison` fills on every engine: the state a stale index reaches, the KV, and the
# bookkeeping put back to its boot copy (never filled with a pattern)
MODE_REGIONS = ("state", "kv", "builders")
# a restore by the dirty set re-proves the whole pool every AUDIT_EVERY restores (and at a
# run's end), so a write outside the tracked blocks is found within 16 points, while the
# read of the whole pool (the 27B shape: 20 GiB, one pass at memory speed) is paid once
# every 16 points
AUDIT_EVERY = 16
# residue_lab_restore_pool's ``how``: the dirty set where it is known, else every storage
RESTORE_HOWS = ("auto", "whole")


def seed_of(pattern: str) -> int:
    """A named pattern's seed, or a number given as the pattern."""
    return PATTERNS[pattern] if pattern in PATTERNS else int(pattern)


def hash24(idx: Any, seed: int, salt: int) -> Any:
    """24 bits per element of the int64 array ``idx`` (Knuth's multiplicative hash of the
    index, seed and salt): exact in float32, so a float fill is the same bytes everywhere."""
    h = (idx * 2654435761 + seed * 40503 + salt * 97) & 0xFFFFFFFF
    return (h ^ (h >> 15)) & 0xFFFFFF


def parse_regions(spec: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """``state,kv`` as a tuple of region names; an unknown or empty one is a ValueError."""
    out = tuple(r for r in spec.split(",") if r)
    bad = [r for r in out if r not in allowed]
    if bad or not out:
        raise ValueError(f"unknown poison region(s) {bad or spec!r}; regions: {', '.join(allowed)}")
    return out
