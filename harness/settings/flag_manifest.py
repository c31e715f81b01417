"""A run's flags as its manifest keeps them (a versioned ``options`` block, the flags' own
spellings), read back for ``--resume`` and ``sweep explain``; and which flags an argv
actually wrote (what a ``--resume`` line asks to change, what ``--url`` refuses)."""
from __future__ import annotations

import argparse
import shlex
from typing import Any, Sequence

from ..errors import UsageError
from .flags import FLAGS, flag_dest, sweep_parser

__all__ = ["FLAGS_VERSION", "flags_json", "namespace_of", "explicit_flags"]


# The version of a manifest's "options" block (flags_json): a reader of a newer one refuses
# it in one line; an older manifest without the block is read from its command line.
FLAGS_VERSION = 1


# never written into the manifest's options (a bearer token); a resumed run takes it from
# the command line it was started with, as before the options block
SECRET_DESTS = ("api_key",)


def flags_json(ns: argparse.Namespace, **derived: Any) -> dict[str, Any]:
    """The sweep flags of ``ns`` as the manifest keeps them: ``{"version", "flags":
    {dest: value}}`` (JSON values; the flags' own spellings, before any parsing into
    options, so a newer harness validates them again). ``derived``: a dest's value that
    another flag decides (``--url`` runs isolation and backend ``live``)."""
    values = {}
    for f in FLAGS:
        if flag_dest(f) in SECRET_DESTS:
            continue
        v = derived.get(flag_dest(f), getattr(ns, flag_dest(f), None))
        values[flag_dest(f)] = list(v) if isinstance(v, (tuple, list)) else v
    return {"version": FLAGS_VERSION, "flags": values}


def namespace_of(manifest: dict[str, Any], what: str) -> argparse.Namespace:
    """A run's parsed sweep flags: the manifest's ``options`` block, else (a manifest from
    before it) its command line parsed again. ``UsageError`` (naming ``what``) when
    neither can be read."""
    block = manifest.get("options")
    if isinstance(block, dict) and isinstance(block.get("flags"), dict):
        if int(block.get("version") or 0) > FLAGS_VERSION:
            raise UsageError(f"{what}: the manifest's options are version {block['version']}, "
                             f"newer than this harness reads ({FLAGS_VERSION}); upgrade it")
        ns = sweep_parser().parse_args([])
        for f in FLAGS:
            dest = flag_dest(f)
            if dest in block["flags"]:
                v = block["flags"][dest]
                default = getattr(ns, dest, None)
                setattr(ns, dest, tuple(v) if isinstance(default, tuple) and v is not None
                        else v)
        try:
            typed = sweep_parser().parse_args(shlex.split(manifest.get("command") or "")[1:])
        except (ValueError, UsageError):
            typed = None
        for dest in SECRET_DESTS:
            setattr(ns, dest, getattr(typed, dest, None))
        return ns
    try:
        return sweep_parser().parse_args(shlex.split(manifest["command"])[1:])
    except (KeyError, ValueError, UsageError) as e:
        raise UsageError(f"{what}: the manifest's command line cannot be read again "
                         f"({e})") from None


def explicit_flags(argv: Sequence[str]) -> dict[str, Any]:
    """``{flag name: parsed value}`` for the flags actually written in ``argv`` (defaults
    left out), e.g. to tell what a ``--resume`` command line asks to change."""
    p = sweep_parser()
    not_given = object()  # not a string: argparse passes a string default through `type`
    p.set_defaults(**{flag_dest(f): [] if f.kw.get("action") == "append" else not_given
                      for f in FLAGS})
    ns = {k: v for k, v in vars(p.parse_args(list(argv))).items()
          if v is not not_given and v != []}
    out: dict[str, Any] = {}
    for f in FLAGS:
        dest = flag_dest(f)
        if dest in ns and f.name not in out:
            # --prefix-cache / --no-prefix-cache share a dest: name the one written
            name = f.name
            if dest == "prefix_cache":
                name = "--prefix-cache" if ns[dest] else "--no-prefix-cache"
            out[name] = ns[dest]
    return out

