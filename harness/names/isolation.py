"""What each ``--isolation`` value is, declared once: one ``Isolation`` per value.

A backend asks the policy instead of comparing isolation strings: whether a slot keeps
its server for the next point of the same configuration (``reuses_server``), how many
boot failures of one configuration end the rest of its points in that pass
(``boot_failures_allowed``), whether a point that is not ok needs a fresh-server
confirmation under ``auto`` (``confirm_fresh``), whether the engine must serve its
development endpoints (``dev_mode``: ``/reset_prefix_cache``, sleep), whether it must be
able to return a server to its just-booted state (``restores``), and whether a point's
requests are the only ones its server runs (``lone_by_construction``: not on a running
server other clients use, ``live``). A run-level value (``auto``) names its passes
instead. Adding an isolation is one entry in ``POLICIES``; ``IsolationName``, the
record's isolations and the ``--isolation`` flag's choices and help
(``Isolation.help``) come from it. What a reused server gets before its next point is
machinery, not a name: ``serve/isolation.MACHINERY`` (an entry there only for a value that
prepares a reused server). A leaf: imports nothing of the harness
(``harness/names/__init__.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Isolation", "IsolationName", "POLICIES", "ISOLATIONS", "RECORD_ISOLATIONS",
           "REUSE_ISOLATIONS", "AUTO_PASSES", "policy", "dev_mode", "restores",
           "isolation_help"]


@dataclass(frozen=True)
class Isolation:
    name: str
    help: str                         # what --help says it does (isolation_help)
    reuses_server: bool = False       # a slot keeps its server for the next point
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
              reuses_server=True, confirm_fresh=True, dev_mode=True, as_fresh=True,
              restores=True),
    Isolation("reset", "one server per configuration, its prefix cache reset between "
              "points: can mask a break, docs/isolation.md", reuses_server=True,
              confirm_fresh=True, dev_mode=True),
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
