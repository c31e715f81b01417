"""What ``publish/compare.compare_records`` finds between two runs, typed: per
configuration and residue the old and new verdict of every phase, the status of each point,
the regressed cells. The gate (``publish/gate.py``), the markdown of ``sweep compare`` and
its ``--json`` (``Comparison.as_dict``) read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

__all__ = ["CellSummary", "PhaseChange", "PointChange", "Regression", "ConfigChange",
           "Comparison"]


@dataclass(frozen=True)
class CellSummary:
    """One side's cell: its verdict, sha1 (12 hex), verbatim n/N, reason, run, rerun line."""

    verdict: str
    sha1: str
    verbatim: str
    reason: str | None
    run_id: str | None
    rerun: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "sha1": self.sha1, "verbatim": self.verbatim,
                "reason": self.reason, "run_id": self.run_id, "rerun": self.rerun}


@dataclass(frozen=True)
class PhaseChange:
    old: CellSummary | None      # None: not measured on that side
    new: CellSummary | None
    # a cell not ok on both sides: whether its bytes may be compared and what they say
    # (records/same_compile.bytes_between: bytes, why, old/new fingerprint); None otherwise
    bytes: dict | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"old": self.old.as_dict() if self.old else None,
               "new": self.new.as_dict() if self.new else None}
        if self.bytes is not None:
            out["bytes"] = self.bytes
        return out


@dataclass(frozen=True)
class PointChange:
    """One prompt (residue, and document when the runs measured several) on both sides."""

    residue: int
    status: str                  # one of compare.STATUSES
    old_status: str | None       # the worst verdict of its phases, None: not measured
    new_status: str | None
    regressed_phases: tuple[str, ...]
    phases: dict[str, PhaseChange]
    # the worst of its phases' bytes words (not_comparable, changed, same); None: no cell
    # not ok on both sides
    bytes: str | None = None
    document: int | None = None  # only when the runs measured several documents

    def as_dict(self) -> dict[str, Any]:
        out = {"residue": self.residue, "status": self.status, "old_status": self.old_status,
               "new_status": self.new_status, "regressed_phases": list(self.regressed_phases),
               "phases": {p: c.as_dict() for p, c in self.phases.items()},
               "bytes": self.bytes}
        if self.document is not None:
            out["document"] = self.document
        return out


@dataclass(frozen=True)
class Regression:
    """A cell ok in the old run and not ok in the new one."""

    config_id: str
    config_label: str
    residue: int
    phase: str
    old_verdict: str
    new_verdict: str
    sha1: str
    reason: str | None
    rerun: str | None
    run_id: str | None
    document: int | None = None  # only when the runs measured several documents

    def as_dict(self) -> dict[str, Any]:
        out = {"config_id": self.config_id, "config_label": self.config_label,
               "residue": self.residue, "phase": self.phase, "old_verdict": self.old_verdict,
               "new_verdict": self.new_verdict, "sha1": self.sha1, "reason": self.reason,
               "rerun": self.rerun, "run_id": self.run_id}
        if self.document is not None:
            out["document"] = self.document
        return out


@dataclass(frozen=True)
class ConfigChange:
    """One matched (or one-sided) configuration and its points."""

    config_id: str
    old_config_id: str | None
    new_config_id: str | None
    config_label: str
    old_config_label: str | None
    matched_by: str              # config_id, config_label, configuration except patches,
                                 # new only, old only
    old_runs: list
    new_runs: list
    counts: dict                 # status -> points
    points: tuple[PointChange, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"config_id": self.config_id, "old_config_id": self.old_config_id,
                "new_config_id": self.new_config_id, "config_label": self.config_label,
                "old_config_label": self.old_config_label, "matched_by": self.matched_by,
                "old_runs": self.old_runs, "new_runs": self.new_runs, "counts": self.counts,
                "points": [p.as_dict() for p in self.points]}


@dataclass(frozen=True)
class Comparison:
    old_runs: list
    new_runs: list
    summary: dict                # status -> points, over every configuration
    regressions: tuple[Regression, ...] = ()
    configs: tuple[ConfigChange, ...] = field(default=())

    def cells(self) -> Iterator[tuple[ConfigChange, PointChange, str, PhaseChange]]:
        """Every phase cell compared: its configuration, its point, the phase's name."""
        for c in self.configs:
            for pt in c.points:
                for phase, cell in pt.phases.items():
                    yield c, pt, phase, cell

    @property
    def regressed(self) -> int:
        """How many cells regressed: non-zero fails a gate."""
        return len(self.regressions)

    @property
    def ok(self) -> bool:
        return not self.regressions

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``sweep compare --json``."""
        return {"old_runs": self.old_runs, "new_runs": self.new_runs, "summary": self.summary,
                "regressions": [r.as_dict() for r in self.regressions],
                "regressed": self.regressed, "configs": [c.as_dict() for c in self.configs],
                "ok": self.ok}
