"""What a flag's value may be: the parsers the flag table (``flags.py``) gives argparse
(``type=``) and the matrix axes (``items=``). Each bad value is one ``UsageError`` or
``ArgumentTypeError`` naming it, which the sweep says in one line, exit 2."""
from __future__ import annotations

import argparse
from typing import Any, Sequence

from engine.presets import PATCHES, PresetError, normalise_patches

from ..errors import UsageError
from ..names.phase import PHASES

__all__ = ["parse_phases", "positive_int", "positive_float", "seconds_at_least", "a_path", "split",
           "choices_of", "ints", "seed_list", "patch_sets", "int_in", "or_none", "LOAD_MODES"]

# --load-mode: background conversations decode on (steady) or are cut and resent (cancel)
LOAD_MODES = ("steady", "cancel")


def positive_int(flag: str):
    def conv(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"{n} must be at least 1")
        return n
    return conv


def positive_float(v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a number") from None
    if x <= 0:
        raise argparse.ArgumentTypeError(f"{x:g} must be positive")
    return x


def seconds_at_least(minimum: float, what: str):
    """A duration in seconds of at least ``minimum`` (``what``: why less cannot work):
    ``--timeout 0.001`` times out every request before an answer can come (issue 50)."""
    def conv(v: str) -> float:
        x = positive_float(v)
        if x < minimum:
            raise argparse.ArgumentTypeError(f"{x:g} s is too short for {what}; give at "
                                             f"least {minimum:g}")
        return x
    return conv


def a_path(v: str) -> str:
    """A file or folder the user names: an empty one is a mistake, never the default
    (``--out ""`` wrote to results/, issue 50)."""
    if not v.strip():
        raise argparse.ArgumentTypeError("an empty path; give a folder or leave the flag out")
    return v


def split(value: str | None) -> list[str]:
    if value is None:
        return []
    return [v.strip() for v in str(value).split(",") if v.strip()]


def choices_of(allowed: Sequence[str]):
    def parse(flag: str, value: str | None) -> list[Any]:
        items = split(value)
        for item in items:
            if item not in allowed:
                raise UsageError(f"{flag}: {item!r} is not valid; allowed: {', '.join(allowed)}")
        return items
    return parse


def ints(allow_none: bool = False, unset: Any = None):
    def parse(flag: str, value: str | None) -> list[Any]:
        out: list[Any] = []
        for item in split(value):
            if allow_none and item.lower() in ("none", "off", "0"):
                out.append("none")
                continue
            try:
                n = int(item.replace("_", ""))
            except ValueError:
                allowed = "integers or 'none'" if allow_none else "integers"
                raise UsageError(f"{flag}: {item!r} is not valid; allowed: {allowed} "
                                 "(comma-separated for a matrix)") from None
            if n <= 0:
                raise UsageError(f"{flag}: {n} must be positive")
            out.append(n)
        return out or [unset]
    return parse


def seed_list(value: str) -> tuple[int, ...]:
    """``--seed 0`` or ``--seed 0,1,2``: one document per seed (documents as an axis)."""
    out: list[int] = []
    for item in split(value):
        try:
            n = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not an integer (a seed or a comma "
                                             "list of seeds: 0,1,2)") from None
        if n < 0:
            raise argparse.ArgumentTypeError(f"{n}: a seed is at least 0")
        if n in out:
            raise argparse.ArgumentTypeError(f"seed {n} is named twice")
        out.append(n)
    if not out:
        raise argparse.ArgumentTypeError("empty; give a seed or a comma list (0,1,2)")
    return tuple(out)


def patch_sets(flag: str, value: str | None) -> list[str]:
    """Patch sets are comma-separated (``none,all``); several named fixes in one set are
    joined with ``+`` (``prefill-discriminator+sliding-window-guard``)."""
    out = []
    for item in split(value) or ["all"]:
        try:
            out.append(normalise_patches(item.replace("+", ",")))
        except PresetError:
            raise UsageError(f"{flag}: {item!r} is not valid; allowed: all, none, or "
                             f"fixes joined by '+' from: {', '.join(PATCHES)}") from None
    return out


def int_in(lo: int, hi: int, why: str):
    """An argparse type: an integer in ``lo..hi`` (``why`` says where the bound comes from)."""
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{n} is outside {lo}..{hi}")
        return n
    parse.__doc__ = why
    return parse


def or_none(parse):
    """A list parser whose empty result is ``[None]`` (the axis left to the preset)."""
    def wrapped(flag: str, value: str | None) -> list[Any]:
        return parse(flag, value) or [None]
    return wrapped


def parse_phases(value: str) -> tuple[str, ...]:
    """``--phases``: the phases in the order they run, each once (every reader of the flag
    parses it here: options, the cross-flag checks, --url's prefix-cache check)."""
    items = choices_of(PHASES)("--phases", value)
    if not items:
        raise UsageError(f"--phases: empty; allowed: {', '.join(PHASES)}")
    if len(set(items)) != len(items):
        raise UsageError(f"--phases: {value!r} names a phase twice")
    # cold is by definition the first request on the server.
    return tuple(sorted(items, key=PHASES.index))
