"""Whose bytes may be compared: a broken cell's answer is only comparable between servers
that share a compile (issue 48).

A broken answer is made of memory nothing wrote for the request, read through the kernels a
compile chose. Under ``--poison`` (the fill and fixed kernel choices) every server of one
machine gave one answer per broken cell, but two H100 machines and two H200s disagreed at
ngram k >= 3 cells (docs/isolation.md), and a lab "compile" (``--compile-seed``) reads
stale lanes in another order. So ``compare``, the gate with a baseline and the report say
whether a non-ok cell's *bytes* changed only where both records name the same compile
fingerprint (``server_boot.compile.fingerprint``: a digest over the server's compile caches
on vLLM, the lab's lane layout on the lab); elsewhere a cell that stays non-ok is "still
broken" and its bytes are "not comparable", with the reason. Ok answers are the document's
text on every compile and stay compared as before.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # only the type of what it reads
    from .phase_record import PhaseRecord

from ..names.verdict import CLEAN

__all__ = ["fingerprint_of", "gpu_models", "bytes_between", "BYTES_WORDS", "bytes_phrase",
           "compile_phrase"]

#: what ``bytes_between`` says, as the report's words
BYTES_WORDS = {"same": "same bytes (same compile)",
               "changed": "other bytes under the same compile",
               "not_comparable": "bytes not comparable"}


def fingerprint_of(r: "PhaseRecord") -> str | None:
    """The compile fingerprint the record's server booted with (None: not recorded)."""
    boot = r.boot
    fp = boot.fingerprint if boot is not None else None
    return str(fp) if fp else None


def gpu_models(r: "PhaseRecord") -> str | None:
    """``NVIDIA H100 80GB HBM3 (0)``: the record's GPUs as the driver named them."""
    boot = r.boot
    gpus = boot.gpu if boot is not None else None
    if not gpus:
        return None
    return ", ".join(f"{g.get('model') or '?'} ({g.get('index')})" for g in gpus
                     if isinstance(g, dict)) or None


def bytes_between(old: "PhaseRecord", new: "PhaseRecord") -> dict[str, Any] | None:
    """Whether two non-ok records of one cell gave the same bytes, where that may be asked:
    ``{"bytes": "same" | "changed" | "not_comparable", "why", "old_fingerprint",
    "new_fingerprint"}``; None when either is ok (ok answers are compared by verdict)."""
    if old.verdict in CLEAN or new.verdict in CLEAN:
        return None
    fo, fn = fingerprint_of(old), fingerprint_of(new)
    out: dict[str, Any] = {"old_fingerprint": fo, "new_fingerprint": fn}
    if fo is None or fn is None:
        side = "either run" if fo is None and fn is None else ("the old run" if fo is None
                                                                 else "the new run")
        out.update(bytes="not_comparable",
                   why=f"{side} recorded no compile fingerprint: a broken answer's bytes "
                       "depend on the compile")
    elif fo != fn:
        out.update(bytes="not_comparable",
                   why=f"other compiles ({fo} → {fn}): a broken answer's bytes hold only "
                       "for servers sharing a compile")
    elif (old.sha1 or "") == (new.sha1 or ""):
        out.update(bytes="same", why=f"the same answer under compile {fn}")
    else:
        out.update(bytes="changed", why=f"another answer under the same compile {fn}")
    return out


def bytes_phrase(b: dict[str, Any] | None) -> str:
    """One line for a report: ``bytes not comparable: other compiles (a → b): ...``."""
    if not b:
        return ""
    return f"{BYTES_WORDS[b['bytes']]}: {b['why']}"


def compile_phrase(records) -> str:
    """The poison row's words on bytes: ``bytes hold for servers sharing this compile
    (fingerprint 1a2b3c4d5e6f, 4 servers)``; servers are counted by their log."""
    servers: dict[str | None, set] = {}
    for r in records:
        boot = r.boot
        servers.setdefault(fingerprint_of(r), set()).add((boot.log if boot else None) or r.run_id)
    named = {fp: n for fp, n in servers.items() if fp}
    if not named:
        return "no compile fingerprint recorded: a broken answer's bytes are not comparable " \
               "with another run's"
    parts = ", ".join(f"{fp} ({len(n)} server{'s' if len(n) != 1 else ''})"
                      for fp, n in sorted(named.items()))
    head = ("bytes hold for servers sharing this compile (fingerprint " if len(named) == 1
            else "bytes hold only for servers sharing a compile (fingerprints ")
    return head + parts + ")" + ("; some servers recorded none" if None in servers else "")
