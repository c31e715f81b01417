"""The one vocabulary of records: phases, verdicts, their severity, graph modes.

Every module that names a phase or a verdict imports it from here (``run.records``
re-exports it for record code), so adding a verdict is one edit (docs/architecture.md).
"""
from __future__ import annotations

from typing import Iterable

__all__ = ["ISOLATIONS", "RECORD_ISOLATIONS", "REUSE_ISOLATIONS", "PHASES", "VERDICTS", "REFERENCES", "UNJUDGED", "SEVERITY", "BUG_VERDICTS", "CLEAN", "FULL_GRAPH_MODES",
           "PREFILL_FIX", "LOAD_MODES", "phase_key", "worst"]

# restore: one server per configuration, returned to its just-booted state between points
# (sleep level 1 + wake + reset, harness/restore.py). auto: restore servers (reset where the
# engine cannot restore) for every residue, then fresh servers for what that pass can hide
# (harness/run/auto.py); each record says which of the two produced it.
# live: a running server the sweep did not start (sweep --url, harness/live.py): isolation
# by content only, each point its own document, cold proven by cached_tokens 0.
ISOLATIONS = ("fresh", "restore", "reset", "shared", "auto", "live")
# The isolations a record can be produced under (auto is a run's, not a record's).
RECORD_ISOLATIONS = ("fresh", "restore", "reset", "shared", "live")
# auto's first pass: one reused server per configuration, cleaned between points
REUSE_ISOLATIONS = ("restore", "reset")
# cold is by definition the first request on a server; the order is the order they run.
PHASES = ("cold", "warm", "self-hit")
# unjudged: an answer with nothing to compare it with (the cold phase under --reference
# cold, a prompt the matrix reference could not answer): not collapsed, and not proven ok.
VERDICTS = ("ok", "diverged", "broken", "crash", "boot-fail", "timeout", "invalid", "infra",
            "unjudged")
# Worst first: a point's status is the worst verdict of its phases.
SEVERITY = ("infra", "boot-fail", "crash", "timeout", "broken", "diverged", "invalid", "unjudged",
            "ok")
BUG_VERDICTS = frozenset({"broken", "diverged"})
CLEAN = frozenset({"ok"})
UNJUDGED = "unjudged"
# --reference words (golden:RUN is the one with an argument)
REFERENCES = ("passage", "cold", "first", "consensus", "golden:RUN")
# cudagraph modes that capture a FULL graph for the speculative verify step (Bug B).
FULL_GRAPH_MODES = frozenset({"FULL", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"})
PREFILL_FIX = "prefill-discriminator"
# --load-mode: background conversations decode on (steady) or are cut and resent (cancel)
LOAD_MODES = ("steady", "cancel")

assert set(SEVERITY) == set(VERDICTS)


def phase_key(phase: str) -> tuple:
    return (PHASES.index(phase) if phase in PHASES else len(PHASES), phase)


def worst(verdicts: Iterable[str]) -> str:
    vs = list(verdicts)
    if not vs:
        return "ok"
    return min(vs, key=lambda v: SEVERITY.index(v) if v in SEVERITY else 0)
