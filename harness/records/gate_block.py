"""The manifest's ``baseline`` block typed: what a ``--baseline`` gate found, cell by cell
(``publish/gate.gate_block`` decides it; the report's baseline section, the terminal, the
JUnit and the pytest plugin read it). Beside ``manifest.py``, whose ``RunManifest.baseline``
it is. Read from any manifest losslessly: a key the model does not name is kept in
``extra``, and ``as_dict()`` gives back what was read, key order included.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .written import Block, written_memory

__all__ = ["GateCell", "StillBroken", "BaselineBlock"]


@dataclass(frozen=True)
class GateCell(Block):
    """One cell the gate regressed on or lost coverage of."""

    config_id: str | None = None
    config_label: str | None = None
    residue: int | None = None
    phase: str | None = None
    old_verdict: str | None = None
    new_verdict: str | None = None      # None: missing now
    document: int | None = None         # only when the run measured several documents
    rerun: str | None = None
    extra: dict = field(default_factory=dict, compare=False)
    _keys: tuple | None = written_memory()

    ORDER = ("config_id", "config_label", "residue", "phase", "old_verdict", "new_verdict",
             "document", "rerun")
    OPTIONAL = frozenset({"document"})


@dataclass(frozen=True)
class StillBroken(Block):
    """A cell not ok in the baseline nor now (it does not fail the gate) and what its bytes
    say: ``bytes`` same / changed / not_comparable and ``why`` (records/same_compile.py:
    bytes are compared only under one compile fingerprint)."""

    config_id: str | None = None
    config_label: str | None = None
    residue: int | None = None
    phase: str | None = None
    old_verdict: str | None = None
    new_verdict: str | None = None
    bytes: str | None = None
    why: str | None = None
    extra: dict = field(default_factory=dict, compare=False)
    _keys: tuple | None = written_memory()

    ORDER = ("config_id", "config_label", "residue", "phase", "old_verdict", "new_verdict",
             "bytes", "why")


@dataclass(frozen=True)
class BaselineBlock(Block):
    """What the gate found against ``--baseline`` (the run's ``passed`` is decided once,
    by ``publish/gate.gate_block``)."""

    source: str = "?"                   # the --baseline value
    runs: list = field(default_factory=list)        # the baseline's run ids
    regressions: tuple[GateCell, ...] = ()           # ok in the baseline, not ok now
    losses: tuple[GateCell, ...] = ()                # judged then, missing or not judged now
    still_broken: tuple[StillBroken, ...] = ()       # not ok then nor now, with the bytes
    allow_fewer: bool = False
    judged_any: bool = True             # a run that judged no cell does not pass
    passed: bool = False
    extra: dict = field(default_factory=dict, compare=False)
    _keys: tuple | None = written_memory()

    ORDER = ("source", "runs", "regressions", "losses", "still_broken", "allow_fewer",
             "judged_any", "passed")
    NESTED = {"regressions": (GateCell, "list"), "losses": (GateCell, "list"),
              "still_broken": (StillBroken, "list")}

    @property
    def failing_losses(self) -> tuple[GateCell, ...]:
        """The lost cells that fail the gate (none when --allow-fewer accepted them)."""
        return () if self.allow_fewer else self.losses
