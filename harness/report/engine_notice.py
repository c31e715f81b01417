"""The lines a report opens with: this is the CPU lab engine, not vLLM; this was a live
server (``sweep --url``), not fresh servers.

A report pasted into an issue is read as a vLLM result unless it says otherwise at the
top; the only other clue (``engine | lab …``) sits in the provenance at the bottom. On the
lab, "the sweep agrees with the rule" holds by construction: the lab implements the
mechanism the rule describes. The notice is part of the markdown, so the ``--gh-issue``
comment and the GitHub step summary (both the report itself) carry it too.
"""
from __future__ import annotations

from ..records.phase_record import PhaseRecord
from ..names.engine import EngineName
from ..names.isolation import IsolationName

__all__ = ["LAB_NOTICE", "engine_notice", "live_notice"]

LAB_NOTICE = ("**Engine: the CPU lab engine** (`engine/lab`), a replica of vLLM's "
              "mechanisms (scheduler, paged KV cache and prefix caching, speculative "
              "decoding, cudagraph dispatch), **not vLLM**. Agreement with the Bug B rule is "
              "expected here by construction; only a sweep of a real engine tests the rule.")


def _engine_of(record: PhaseRecord) -> str | None:
    cfg = record.config if isinstance(record.config, dict) else {}
    return record.engine or cfg.get("engine")


def engine_notice(records: list[PhaseRecord]) -> str | None:
    """The notice when any record came from the lab engine, else None."""
    engines = {_engine_of(r) for r in records}
    if EngineName.LAB not in engines:
        return None
    others = sorted(e for e in engines if e and e != EngineName.LAB)
    if others:
        return LAB_NOTICE + f" Records of {', '.join(others)} are in this report too."
    return LAB_NOTICE


def live_notice(records: list[PhaseRecord]) -> str | None:
    """The notice of a ``sweep --url`` run (records with isolation ``live``), else None."""
    urls = sorted({str((r.config or {}).get("url") or "?") for r in records
                   if r.isolation == IsolationName.LIVE})
    if not urls:
        return None
    return ("**Swept a live server** (" + ", ".join(f"`{u}`" for u in urls) + "), as it "
            "runs: nothing started, nothing stopped. Isolation `live`: every point on a "
            "document of its own, each cold phase proven cold by `cached_tokens` 0 and each "
            "hit by `cached_tokens` > 0 (else `invalid`, also where the server reports no "
            "`cached_tokens`). A server that has served other "
            "requests **cannot show breaks that only a fresh server shows** (a fresh server's "
            "first request, a cache or state that other traffic changed): a clean live sweep "
            "is not a clean fresh sweep.")
