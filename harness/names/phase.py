"""The phases of a data point, in the order they run (docs/records.md): ``cold`` is by
definition the first request on its server, ``warm`` the same prompt again, ``self-hit`` the
prompt once more over the prefix the cold request cached. A leaf: imports nothing of the
harness (``harness/names/__init__.py``)."""
from __future__ import annotations

from enum import StrEnum

__all__ = ["PHASES", "PhaseName", "phase_key"]

PHASES = ("cold", "warm", "self-hit")
# A phase as a value, one member per phase: PhaseName.COLD == "cold", PhaseName.SELF_HIT ==
# "self-hit"; comparisons name the member, never the string.
PhaseName = StrEnum("PhaseName", [(p.upper().replace("-", "_"), p) for p in PHASES],
                    module=__name__)


def phase_key(phase: str) -> tuple:
    """A phase's place in a sort: the run order, a word of no phase last."""
    return (PHASES.index(phase) if phase in PHASES else len(PHASES), phase)
