"""A run's timing and plan, typed: the manifest's ``timing`` block
(``run/driver.timing_summary``: where the wall time went; under ``--isolation auto`` its
``passes``; its servers' ``boot_split``), ``RunManifest.timing``; and its ``plan`` (the points
planned), ``RunManifest.plan``. Read as written and written back as read.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Mapping

from .phase_record import typed_view as _view
from .written import Block, written_memory


__all__ = ["RunTiming", "PassTiming", "BootSplit", "RunPlan"]


@dataclass(frozen=True)
class PassTiming:
    """One ``--isolation auto`` pass of a manifest's ``timing.passes``."""

    points: int | None = None
    sum_boot_s: float | None = None
    median_boot_s: float | None = None
    median_requests_s: float | None = None
    restored_points: int | None = None
    median_restore_s: float | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class BootSplit:
    """A manifest's ``timing.boot_split``: how its servers started (``run.driver.boot_summary``)."""

    servers: int | None = None
    launchers: dict = field(default_factory=dict)        # launcher -> servers
    fallback_reasons: list = field(default_factory=list)
    compile_cache: dict = field(default_factory=dict)    # hit / miss / mixed -> servers
    median_s: dict = field(default_factory=dict)         # boot stage -> median seconds
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunTiming:
    """Where a run's wall time went: a manifest's ``timing`` (``run.driver.timing_summary``)
    read typed, with its auto passes and its servers' boot split."""

    wall_s: float | None = None
    slots: int | None = None
    points: int | None = None
    median_boot_s: float | None = None
    passes: dict = field(default_factory=dict)   # pass name -> PassTiming
    all_fresh_estimate_s: float | None = None    # auto: every reuse point run fresh
    ratio_to_all_fresh: float | None = None
    boot_split: BootSplit | None = None
    extra: dict = field(default_factory=dict)

    # the block as written (``from_dict``): ``as_dict`` gives it back, key order included
    _written: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RunTiming":
        """A manifest's ``timing`` block as written (``run/driver.timing_summary``, its
        auto ``passes`` and ``boot_split``), typed."""
        t = dict(d)
        passes = dict(t.pop("passes", None) or {})
        estimate = {k: passes.pop(k) for k in ("all_fresh_estimate_s", "ratio_to_all_fresh")
                    if k in passes}
        split = t.pop("boot_split", None)
        return cls(**{k: v for k, v in t.items() if k in _RUN_TIMING},
                   passes={k: _view(PassTiming, p) for k, p in passes.items() if p},
                   boot_split=_view(BootSplit, split) if split else None,
                   extra={k: v for k, v in t.items() if k not in _RUN_TIMING},
                   _written=copy.deepcopy(dict(d)), **estimate)

    def as_dict(self) -> dict[str, Any]:
        """The block as it was written (this view is read-only: nothing is set on it)."""
        return copy.deepcopy(self._written)

    @classmethod
    def of(cls, manifest: Mapping[str, Any] | None) -> "RunTiming":
        """The timing of a run manifest as read from its JSON (empty for one without: an
        interrupted run); a typed ``RunManifest`` holds it as ``timing``."""
        timing = (manifest or {}).get("timing")
        return cls.from_dict(timing) if isinstance(timing, Mapping) else cls()


_RUN_TIMING = frozenset({"wall_s", "slots", "points", "median_boot_s"})


@dataclass
class RunPlan(Block):
    """A manifest's ``plan``: the points a run planned, in all and per configuration and
    pass (``{config_id: {isolation: points}}``), kept up to date by ``run/driver.Driver`` as
    a backend adds points, so an interrupted run's report can say how many ran and
    ``--resume`` goes on from it. Read as written, written back in the order read."""

    points: int | None = None
    by_config: dict | None = None         # as written (None: the manifest had none)
    extra: dict = field(default_factory=dict)
    _keys: tuple | None = written_memory()

    ORDER = ("points", "by_config")

    def add(self, config_id: str, isolation: str) -> None:
        """One more point of ``config_id`` in pass ``isolation``."""
        if not isinstance(self.by_config, dict):
            self.by_config = {}
        n = self.by_config.setdefault(config_id, {})
        n[isolation] = n.get(isolation, 0) + 1
        self.points = (self.points or 0) + 1

    def planned(self, config_id: str | None = None, isolation: str | None = None
                ) -> int | None:
        """Points planned (of one configuration and pass, when given)."""
        if config_id is None:
            return self.points
        by = (self.by_config or {}).get(config_id) or {}
        return sum(n for iso, n in by.items() if isolation is None or iso == isolation)

