"""The manifest's ``baseline`` block typed: what a ``--baseline`` gate found, cell by cell
(``publish/gate.gate_block`` decides it; the report's baseline section, the terminal, the
JUnit and the pytest plugin read it). Beside ``manifest.py``, whose ``RunManifest.baseline``
it is. Read from any manifest losslessly: a key the model does not name is kept in
``extra``, and ``as_dict()`` gives back what was read, key order included.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["GateCell", "StillBroken", "BaselineBlock"]


def _read(cls, d: Mapping[str, Any]):
    """``cls`` from a mapping as written: the keys it names, the rest in ``extra``; the
    keys' order kept for ``as_dict``."""
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    obj = cls(**{k: v for k, v in d.items() if k in names},
              extra={k: v for k, v in d.items() if k not in names})
    object.__setattr__(obj, "_keys", tuple(d))
    return obj


def _written(obj, order: tuple[str, ...], optional: frozenset[str]) -> dict[str, Any]:
    """``obj`` as written: a block read back in its own keys' order (the ones it lacked
    stay absent), a new one in ``order`` (``optional`` keys only when set)."""
    keys = obj._keys or tuple(k for k in order
                              if k not in optional or getattr(obj, k) is not None)
    out = {k: getattr(obj, k) if k in order else obj.extra[k]
           for k in keys if k in order or k in obj.extra}
    out.update((k, v) for k, v in obj.extra.items() if k not in out)
    return out


@dataclass(frozen=True)
class GateCell:
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
    _keys: tuple = field(default=(), repr=False, compare=False)

    ORDER = ("config_id", "config_label", "residue", "phase", "old_verdict", "new_verdict",
             "document", "rerun")

    def as_dict(self) -> dict[str, Any]:
        return _written(self, self.ORDER, frozenset({"document"}))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GateCell":
        return _read(cls, d)


@dataclass(frozen=True)
class StillBroken:
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
    _keys: tuple = field(default=(), repr=False, compare=False)

    ORDER = ("config_id", "config_label", "residue", "phase", "old_verdict", "new_verdict",
             "bytes", "why")

    def as_dict(self) -> dict[str, Any]:
        return _written(self, self.ORDER, frozenset())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "StillBroken":
        return _read(cls, d)


_CELLS = {"regressions": GateCell, "losses": GateCell, "still_broken": StillBroken}


@dataclass(frozen=True)
class BaselineBlock:
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
    _keys: tuple = field(default=(), repr=False, compare=False)

    ORDER = ("source", "runs", "regressions", "losses", "still_broken", "allow_fewer",
             "judged_any", "passed")

    @property
    def failing_losses(self) -> tuple[GateCell, ...]:
        """The lost cells that fail the gate (none when --allow-fewer accepted them)."""
        return () if self.allow_fewer else self.losses

    def as_dict(self) -> dict[str, Any]:
        out = _written(self, self.ORDER, frozenset())
        for key in _CELLS:
            if key in out:
                out[key] = [c.as_dict() for c in out[key]]
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BaselineBlock":
        cells = {k: tuple(cell.from_dict(c) for c in d.get(k) or ())
                 for k, cell in _CELLS.items() if k in d}
        return _read(cls, {**d, **cells})
