"""A run's flags as its manifest keeps them (a versioned ``options`` block, the flags' own
spellings), read back for ``--resume`` and ``sweep explain``; and a command line parsed
once (``parse_flags``): its namespace and which flags it actually wrote (what a
``--resume`` line asks to change, what ``--url`` refuses, what ``--serve`` must agree with)."""
from __future__ import annotations

import argparse
import copy
import functools
import shlex
from typing import Any, Sequence

from ..errors import UsageError
from ..records.manifest import RunManifest, as_manifest
from ..records.manifest_blocks import RunFlags
from .flags import FLAGS, flag_dest, sweep_parser

__all__ = ["FLAGS_VERSION", "flags_json", "namespace_of", "parse_flags", "explicit_flags"]


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


def namespace_of(manifest: RunManifest | dict[str, Any], what: str
                 ) -> tuple[argparse.Namespace, dict[str, Any]]:
    """A run's parsed sweep flags (its manifest as read or typed): the manifest's
    ``options`` block, else (a manifest from before it) its command line; and the flags
    that command line wrote (``parse_flags``: the command line is parsed once).
    ``UsageError`` (naming ``what``) when neither can be read."""
    manifest = as_manifest(manifest)
    block = manifest.options
    flags = block.flags if isinstance(block, RunFlags) and isinstance(block.flags, dict) else None
    try:
        typed, written = parse_flags(shlex.split(manifest.command or "")[1:])
    except (ValueError, UsageError) as e:
        if flags is None:
            raise UsageError(f"{what}: the manifest's command line cannot be read again "
                             f"({e})") from None
        typed, written = None, {}
    if flags is None:
        if not manifest.command:
            raise UsageError(f"{what}: the manifest's command line cannot be read again "
                             "('command')")
        return typed, written
    if int(block.version or 0) > FLAGS_VERSION:
        raise UsageError(f"{what}: the manifest's options are version {block.version}, "
                         f"newer than this harness reads ({FLAGS_VERSION}); upgrade it")
    ns = copy.deepcopy(_defaults())
    for f in FLAGS:
        dest = flag_dest(f)
        if dest in flags:
            v = flags[dest]
            default = getattr(ns, dest, None)
            setattr(ns, dest, tuple(v) if isinstance(default, tuple) and v is not None else v)
    for dest in SECRET_DESTS:
        setattr(ns, dest, getattr(typed, dest, None))
    return ns, written


def parse_flags(argv: Sequence[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """``argv`` parsed once: the namespace (every flag, its default where not written) and
    ``{flag name: parsed value}`` of the flags actually written, e.g. to tell what a
    ``--resume`` command line asks to change or what ``--url`` refuses."""
    p = sweep_parser()
    not_given = object()  # not a string: argparse passes a string default through `type`
    p.set_defaults(**{flag_dest(f): [] if f.kw.get("action") == "append" else not_given
                      for f in FLAGS})
    raw = vars(p.parse_args(list(argv)))
    given = {k: v for k, v in raw.items() if v is not not_given and v != []}
    defaults = _defaults()
    ns = argparse.Namespace(**{k: given[k] if k in given else copy.copy(getattr(defaults, k))
                               for k in raw})
    written = _written_names(given)
    # --prefix-cache and --no-prefix-cache share a dest: the parse keeps the last one
    # written, so both written is read off the tokens (a rule of flag_checks refuses it)
    both = ("--prefix-cache", "--no-prefix-cache")
    if all(any(a == f or a.startswith(f + "=") for a in argv) for f in both):
        written.update({"--prefix-cache": True, "--no-prefix-cache": False})
    return ns, written


@functools.lru_cache(maxsize=1)
def _defaults() -> argparse.Namespace:
    """Every flag's default as the parser gives it (a string default through its ``type``)."""
    return sweep_parser().parse_args([])


def _written_names(given: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in FLAGS:
        dest = flag_dest(f)
        if dest in given and f.name not in out:
            # --prefix-cache / --no-prefix-cache share a dest: name the one written
            name = f.name
            if dest == "prefix_cache":
                name = "--prefix-cache" if given[dest] else "--no-prefix-cache"
            out[name] = given[dest]
    return out


def explicit_flags(argv: Sequence[str]) -> dict[str, Any]:
    """``{flag name: parsed value}`` for the flags actually written in ``argv`` (defaults
    left out): ``parse_flags``' second half."""
    return parse_flags(argv)[1]
