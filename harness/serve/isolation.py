"""What each ``--isolation`` value does, declared once: one ``Isolation`` per value.

A backend asks the policy instead of comparing isolation strings: whether a slot keeps
its server for the next point of the same configuration (``reuses_server``), what a
reused server gets before that point (``prepare``: a prefix-cache reset, ...), how many
boot failures of one configuration end the rest of its points in that pass
(``boot_failures_allowed``), whether a point that is not ok needs a fresh-server
confirmation under ``auto`` (``confirm_fresh``), whether the engine must serve its
development endpoints (``dev_mode``: ``/reset_prefix_cache``, sleep), whether it must be
able to return a server to its just-booted state (``restores``), and whether a point's
requests are the only ones its server runs (``lone_by_construction``: not on a running
server other clients use, ``live``). A run-level value
(``auto``) names its passes instead. Adding an isolation is one entry in ``POLICIES``
(and, when it prepares a reused server, its ``prepare`` function here);
``vocabulary.ISOLATIONS``, ``IsolationName`` and the ``--isolation`` flag's choices and
help (``Isolation.help``) come from it.

Standard library only: ``flags`` reads the names through ``vocabulary``.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Awaitable, Callable

__all__ = ["Isolation", "IsolationName", "POLICIES", "ISOLATIONS", "RECORD_ISOLATIONS",
           "REUSE_ISOLATIONS", "policy", "dev_mode", "restores", "isolation_help", "AUTO_PASSES"]

# (client, server, info) -> seconds to record under ``timing[name]``, or None; ``info``
# is what the point's records carry about its server (e.g. ``reset_error``).
Prepare = Callable[[Any, Any, dict], Awaitable["float | None"]]


async def _reset_prefix_cache(client: Any, server: Any, info: dict) -> None:
    """``reset``: the prefix cache emptied; a failure is recorded, not fatal (the next cold
    request's ``cached_tokens`` proves the reset or not)."""
    from .client import ClientError
    try:
        await client.reset_prefix_cache()
        info.pop("reset_error", None)
    except ClientError as e:
        info["reset_error"] = str(e)
    return None


async def _restore(client: Any, server: Any, info: dict) -> float:
    """``restore``: the reused server returned to its just-booted state (harness/serve/restore.py:
    sleep level 1, wake up, reset, each step proven); what was proven goes into
    ``info["restore"]``. Its seconds.

    A step that fails leaves a server nobody can trust: on vLLM 0.26.0 (the H200, 13 servers
    on one GPU) the worker's sleep asserted "Memory usage increased after sleeping" (it
    compares the device's free memory, which other servers changed meanwhile) after the
    engine had paused its scheduler and cumem had discarded the memory; a wake-up then finds
    the executor not asleep and maps nothing back, and a request sent there waited in the
    paused engine until the 120 s timeout. So no request goes there: ``info["unusable"]``
    tells the backend to stop that server and run the point on a just-booted one (which is
    what a restore stands in for), and that point's record names the failed restore."""
    import time
    from .client import ClientError
    from .poison import refill
    from .restore import RestoreFailed, restore_by_fill, restore_server
    t0 = time.monotonic()
    try:
        if info.get("_fill_restores"):   # the engine's fill stands for a boot: no weights moved
            info["restore"] = await restore_by_fill(client, info["poison"])
        else:
            info["restore"] = await restore_server(client, server.log_path)
            if (info.get("poison") or {}).get("mode") == "on":
                # a wake maps new memory: fill it again, so the record's poison claim holds
                info["restore"]["fill"] = await refill(client, info["poison"], whole=True)
    except (RestoreFailed, ClientError) as e:
        info["restore"] = {"means": "failed", "error": str(e),
                           **({"checks": e.checks} if getattr(e, "checks", None) else {})}
        info["unusable"] = f"restore failed on the reused server (replaced): {e}"
    return round(time.monotonic() - t0, 4)


def _just_booted(info: dict, replaced: str | None = None) -> None:
    """``restore``: a just-booted server needs no restore; its records say so, and why
    the server is new when it replaced one whose restore failed."""
    info["restore"] = {"means": "boot", "s": 0.0}
    if replaced:
        info["restore"]["replaced"] = replaced


@dataclass(frozen=True)
class Isolation:
    name: str
    help: str                         # what --help says it does (isolation_help)
    reuses_server: bool = False       # a slot keeps its server for the next point
    prepare: Prepare | None = None    # what a reused server gets before the next point
    booted: Callable[[dict, str | None], None] | None = None   # a just-booted server's note
    # points of one configuration in this pass that failed to boot (each after
    # run.point.BOOT_ATTEMPTS boots) before its remaining points are recorded boot-fail
    # without booting: a fresh server per point allows a second failed point (a boot can
    # fail for a passing reason, an OOM beside other servers on one GPU)
    boot_failures_allowed: int = 1
    confirm_fresh: bool = False       # auto: a point not ok here gets a fresh twin
    as_fresh: bool = False            # as good as a fresh server (the report calls others weaker)
    # a point's cold request is the first its server serves (a new server per point): cold
    # by construction where the server reports no cached_tokens; elsewhere it is unproven
    cold_by_construction: bool = False
    # a point's requests are the only ones its server runs (the sweep started the server
    # and sends it nothing else): a lone request by construction. Elsewhere (a running
    # server other clients use) a phase is lone only where /metrics shows it
    # (run/traffic.py), else its matching answer is `not-lone`
    lone_by_construction: bool = True
    dev_mode: bool = False            # the engine serves its development endpoints
    # a reused server is returned to its just-booted state: the engine must be able to
    # (EngineAdapter.can_restore), and its servers start in sleep mode (for_isolation)
    restores: bool = False
    passes: tuple[str, ...] = ()      # a run-level value: the isolations of its passes


POLICIES: dict[str, Isolation] = {p.name: p for p in (
    Isolation("fresh", "new server per point", boot_failures_allowed=2, as_fresh=True,
              cold_by_construction=True),
    # the engine must be able to restore (EngineAdapter.can_restore; its servers start in
    # sleep mode, EngineAdapter.for_isolation)
    Isolation("restore", "one server per configuration, returned to its just-booted state "
              "between points: sleep level 1 + wake + reset",   # harness/serve/restore.py
              reuses_server=True, prepare=_restore, booted=_just_booted, confirm_fresh=True,
              dev_mode=True, as_fresh=True, restores=True),
    Isolation("reset", "one server per configuration, its prefix cache reset between "
              "points: can mask a break, docs/isolation.md", reuses_server=True,
              prepare=_reset_prefix_cache, confirm_fresh=True, dev_mode=True),
    Isolation("shared", "one server per configuration, nothing reset", reuses_server=True),
    # its first pass is restore where the engine can restore, else reset (run/auto.py)
    Isolation("auto", "restore sweep, reset where the engine cannot restore, then "
              "fresh-server confirmation of every non-ok residue, the rule's k, k+1, k+2 on "
              "two or more documents and a seeded sample of ok residues",
              passes=("restore", "reset", "fresh")),
    # sweep --url: a running server the sweep did not start (harness/run/live.py); isolation
    # by content only, each point its own document, cold proven by cached_tokens 0
    Isolation("live", "what --url runs: a server the sweep did not start, nothing reset; "
              "implied by --url", reuses_server=True, lone_by_construction=False),
)}

ISOLATIONS = tuple(POLICIES)
# An isolation as a value, one member per entry: IsolationName.FRESH == "fresh" (a StrEnum:
# a record or manifest that holds a member writes the word), so comparisons name the member
# (or ask the policy), never the string.
IsolationName = StrEnum("IsolationName", [(n.upper(), n) for n in POLICIES], module=__name__)
# The isolations a record can be produced under (a run-level one is a run's, not a record's)
RECORD_ISOLATIONS = tuple(n for n, p in POLICIES.items() if not p.passes)
AUTO_PASSES = POLICIES["auto"].passes   # (the reuse passes, the fresh confirmations)
# auto's first pass: one reused server per configuration, cleaned between points
REUSE_ISOLATIONS = tuple(n for n in AUTO_PASSES if POLICIES[n].reuses_server)


def policy(name: str) -> Isolation:
    """The policy of an isolation value (``KeyError`` for a value nothing declared)."""
    return POLICIES[name]


def dev_mode(name: str) -> bool:
    """Whether servers of a run under ``name`` need the engine's development endpoints."""
    p = POLICIES.get(name)
    if p is None:
        return False
    return p.dev_mode or any(POLICIES[x].dev_mode for x in p.passes)


def restores(name: str) -> bool:
    """Whether a run's servers under ``name`` are returned to their just-booted state (its
    passes aside: auto's restore pass asks per point)."""
    p = POLICIES.get(name)
    return p is not None and p.restores


def isolation_help(default: str) -> str:
    """``--isolation``'s help: every value and what it does (``Isolation.help``)."""
    return " | ".join(f"{n} ({p.help}{', default' if n == default else ''})"
                      for n, p in POLICIES.items())
