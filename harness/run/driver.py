"""The driver: the only writer of a run.

A backend decides where data points run; whatever it is, it reports each point to the
driver (``point_started``, ``phase_done`` as a phase's record completes, ``point_done``
with the point's records and timing, ``point_lost`` when the infrastructure lost it), and
the driver alone writes the results file, the manifest, the counters, the timing summary
and the progress callback. Resume pruning happens here too, so every backend resumes the
same way (like pytest-xdist's ``DSession``, which owns the state while its worker
controllers only turn worker messages into events).
"""
from __future__ import annotations

import shlex
import socket
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..settings.configs import config_id
from ..settings.sweep_options import SweepOptions
from ..names.reference import MATRIX_REFERENCES
from ..serve.engines import EngineAdapter
from ..serve.gpu_info import gpu_record
from ..errors import UsageError
from ..names.isolation import AUTO_PASSES, IsolationName
from ..provenance import harness_version
from ..server_pool import ServerGroup
from ..records.manifest import RunManifest
from ..records.manifest_blocks import (CaseFacts, ConfigEntry, ExplainsLink, PromptsBlock,
                                       RunBackend, RunFlags, RunLink)
from ..records.run_timing import RunPlan, RunTiming
from ..records.store import ResultStore, now_iso
from .plan import Point, SweepPlan
from .point import RunnerSpec
from .auto import resume_confirmations
from .record_builder import RecordBuilder, timing_record
from ..records.phase_record import PhaseRecord

__all__ = ["Driver", "Counters", "timing_summary"]



@dataclass
class Counters:
    total_points: int
    points_done: int = 0
    verdicts: Counter = field(default_factory=Counter)
    timings: list[dict[str, float]] = field(default_factory=list)
    boots: dict[str, dict] = field(default_factory=dict)   # server log name -> server_boot


class Driver:
    """Owns one run's store, manifest and counters; backends report points to it."""

    def __init__(self, opts: SweepOptions, adapter: EngineAdapter, store: ResultStore,
                 plan: SweepPlan, *, golden: dict[tuple, str] | None = None,
                 on_point_done: Callable[[Point, list[PhaseRecord]], None] | None = None,
                 version: str | None = None, launcher: Any = None,
                 links: dict[str, Any] | None = None, servers: ServerGroup | None = None):
        self.opts = opts
        self.links = dict(links or {})   # e.g. {"explains": {...}}: this run's parent run
        self.store = store
        self.plan = plan
        self.servers = servers if servers is not None else ServerGroup()   # the run's own
        self.on_point_done = on_point_done
        self.on_point_added: Callable[[Point], None] | None = None
        self.runner_spec = RunnerSpec(opts, adapter, store.run_id,
                                      version or harness_version(), dict(golden or {}),
                                      launcher=launcher)
        self.records = RecordBuilder(store.run_id, self.runner_spec.version, opts.running.isolation,
                                     opts.measure.reference, tuple(opts.measure.phases))
        self.counters = Counters(total_points=len(plan.points))
        self.manifest = RunManifest(run_id=store.run_id)   # start() builds or reads it
        self.resumed = 0            # --resume: points already complete on disk
        self.records_on_disk = 0    # --resume: their records

    @property
    def run_id(self) -> str:
        return self.store.run_id

    # -- what a backend asks (it never reaches into the store) ---------------------------
    @property
    def logs_dir(self) -> Path:
        """Where this run's server logs go."""
        return self.store.logs_dir

    def records_so_far(self) -> list[PhaseRecord]:
        """Every record of this run on disk now (a resumed run's earlier ones included):
        the one place the driver reads its store's records."""
        return self.store.read()

    def point_runner(self, http: Any) -> Any:
        """A ``run.point.PointRunner`` for this run, its logs in ``logs_dir``, its requests
        through ``http`` (an ``httpx.AsyncClient``), its servers in the run's
        ``servers`` group."""
        return self.runner_spec.make(self.store.logs_dir, http, launcher=self.servers.launcher(
            self.runner_spec.launcher))

    # -- before the points -------------------------------------------------------------
    def start(self) -> list[Point]:
        """Write the manifest (or, on ``--resume``, drop the records of points cut off
        mid-way and read it back); returns the points still to run."""
        points = self.plan.points
        if self.opts.running.resume:
            self.manifest = self.store.read_manifest()
            self._check_same_cases()   # before anything on disk is touched
            want = {p.key: set(self.opts.measure.phases) for p in points}
            done = self.store.prune_partial(want, keep_unplanned=True)
            todo = [p for p in points if p.key not in done]
            if self.opts.running.isolation == IsolationName.AUTO:  # confirmations added while it ran
                todo += resume_confirmations(points, todo, self.records_so_far())
            added = todo[len([p for p in points if p.key not in done]):]
            points = todo
            self.counters.total_points = len(done) + len(points)
            self.resumed = len(done)
            self.records_on_disk = len(self.store.read())
            self._plan_from(self.manifest.plan, self.plan.points, added)
        else:
            self.manifest = self._new_manifest()
            self._plan_from(None, self.plan.points, [])
        self.store.write_manifest(self.manifest)
        return points

    def _plan_from(self, recorded: RunPlan | None, planned: list[Point],
                   added: list[Point]) -> None:
        """The manifest's ``plan``: points planned in all and per configuration and pass,
        kept up to date as a backend adds points, so a report of an interrupted run can say
        how many of them ran (``--resume`` goes on from the recorded plan)."""
        if isinstance(recorded, RunPlan) and isinstance(recorded.by_config, dict):
            # it counted the confirmations added while the run ran, `added` among them
            by = {cid: dict(n) for cid, n in recorded.by_config.items()}
            self.manifest.plan = RunPlan(points=sum(sum(n.values()) for n in by.values()),
                                         by_config=by)
            return
        plan = RunPlan(points=0, by_config={})
        for pt in [*planned, *added]:
            plan.add(pt.cfg_id, pt.isolation or self.opts.running.isolation)
        self.manifest.plan = plan

    def _check_same_cases(self) -> None:
        """--resume of a --prompts run: the prompt file must still say what it said when
        the run started (a changed case would mix two prompts under one case id)."""
        prompts = self.manifest.prompts
        started = (prompts.cases if isinstance(prompts, PromptsBlock) else None) or {}
        for cid, facts in self.plan.cases.items():
            old = started.get(cid)
            if isinstance(old, CaseFacts) and old.digest != facts.get("digest"):
                raise UsageError(f"--resume {self.run_id}: case {cid!r} of {self.opts.measure.prompts} "
                                 "changed since the run started; start a new run")

    def _new_manifest(self) -> RunManifest:
        """The manifest of a run starting now (``plan`` and the end come later)."""
        opts, plan = self.opts, self.plan
        links = {k: _typed_link(v) for k, v in self.links.items() if k != "explains"}
        return RunManifest(
            run_id=self.run_id, command=shlex.join(["sweep", *opts.argv]),
            options=RunFlags.from_dict(opts.flags) if opts.flags else None,
            harness_version=self.runner_spec.version, engine=opts.serving.engine,
            host=socket.gethostname(), started_at=now_iso(), ended_at=None,
            configs=tuple(ConfigEntry(config_id=config_id(c), config_label=c.label(),
                                      config=c.as_dict()) for c in opts.serving.configs),
            residues=sorted({p.residue for p in plan.points}),
            modulus=opts.measure.modulus or "auto",
            phases=list(opts.measure.phases), isolation=opts.running.isolation,
            reference=opts.measure.reference, context=opts.measure.context,
            slots=[s.id for s in opts.running.slots],
            gpus={s.id: gpu_record(s.gpu) for s in opts.running.slots if s.gpu is not None} or None,
            sampled={k: v for k, v in plan.sampled.items() if v},
            planning_s=round(plan.planning_s, 3), interrupted=False, exit_code=None,
            documents=sorted({p.document_seed for p in plan.points}),
            launcher=opts.serving.launcher,
            cache_dir=str(opts.serving.cache_dir) if opts.serving.cache_dir else None,
            auto_sample=opts.running.auto_sample if opts.running.isolation == IsolationName.AUTO else None,
            explains=_typed_link(self.links.get("explains"), ExplainsLink),
            # --prompts: the file and, per case, its line, padding and lengths
            prompts=PromptsBlock(file=opts.measure.prompts, cases={
                cid: CaseFacts.from_dict(f) for cid, f in plan.cases.items()})
            if opts.measure.prompts else None,
            extra=links)

    # -- events from a backend ---------------------------------------------------------
    def point_added(self, point: Point) -> None:
        """A backend planned one more point while running (an auto run's fresh
        confirmation of a reset point that was not ok)."""
        self.counters.total_points += 1
        if self.manifest.plan is not None:
            self.manifest.plan.add(point.cfg_id, point.isolation or self.opts.running.isolation)
            self.store.write_manifest(self.manifest)
        if self.on_point_added:
            self.on_point_added(point)

    def point_started(self, point: Point, where: str = "") -> None:
        """A backend began ``point`` (``where``: slot or node); nothing is written yet."""

    def phase_done(self, record: PhaseRecord) -> None:
        """One phase's record, written the moment it completes (an interrupted run keeps
        every finished phase on disk)."""
        self.store.append(record)

    def server_log(self, name: str, text: str) -> None:
        """A server log shipped back from another node, kept beside this run's own."""
        logs_dir = self.store.logs_dir
        logs_dir.mkdir(parents=True, exist_ok=True)
        (logs_dir / Path(name).name).write_text(text, encoding="utf-8")

    def point_done(self, point: Point, records: list[PhaseRecord],
                   timing: dict[str, float] | None,
                   *, written: bool = False) -> None:
        """A point is finished: its records (written now unless ``phase_done`` already
        wrote them), its timing, the counters, the progress callback."""
        if not written:
            for rec in records:
                self.store.append(rec)
        self.counters.points_done += 1
        for r in records:
            self.counters.verdicts[r.verdict] += 1
        if timing is not None:
            self.counters.timings.append(timing)
        self._note_boot(records, timing)
        if self.on_point_done:
            self.on_point_done(point, records)

    def _note_boot(self, records: list[PhaseRecord], timing: dict[str, float] | None) -> None:
        """Keep each server's boot notes once, with the first request's extra latency
        (Triton JIT and the like) measured on the point that booted it."""
        booted = next((r for r in records if r.server_boot), None)
        boot = booted.boot if booted is not None else None
        if boot is None or boot.log in self.counters.boots:
            return
        notes = dict(booted.server_boot)   # kept as the records wrote them
        lat = [r.latency_s for r in records]
        if timing is not None and timing.get("boot") and len(lat) >= 2 and None not in lat:
            notes["first_request_extra_s"] = self.runner_spec.adapter.first_request_extra_s(lat)
        self.counters.boots[boot.log or str(len(self.counters.boots))] = notes

    def point_lost(self, point: Point, *, slot: str, node: str, reason: str,
                   since: float, extra: dict[str, Any] | None = None) -> list[PhaseRecord]:
        """The infrastructure lost ``point`` for good: one ``infra`` record per phase
        (not measured), counted like any finished point."""
        records = self.records.failures(point, slot, node, "infra", reason, [], extra)
        self.point_done(point, records, timing_record(point=time.monotonic() - since))
        return records

    # -- after the points --------------------------------------------------------------
    def close(self) -> None:
        """No point runs any more: the results file is closed (every record is on disk)."""
        self.store.close()

    def final_records(self, *, judge: bool) -> list[PhaseRecord]:
        """The run's records as they stay: under ``--reference first`` / ``consensus``
        (``judge``: the run was not interrupted) every open verdict judged against the
        matrix reference, written here, atomically, in place of the records as measured
        (``run/matrix_reference.py``); the driver stays the only writer."""
        records = self.records_so_far()
        if judge and self.opts.measure.reference in MATRIX_REFERENCES:
            from .matrix_reference import rejudge
            records = rejudge(records, self.opts.measure.reference,
                              [config_id(c) for c in self.opts.serving.configs])
            self.store.rewrite(records)
        return records

    def finish(self, *, wall: float, interrupted: bool, backend: dict[str, Any]) -> RunManifest:
        """The manifest's end: dates, wall time, the backend's description, timing."""
        launcher = self.runner_spec.launcher
        described = RunBackend.from_dict({**backend, **(launcher.describe() if launcher else {})})
        n_slots = described.slots or len(self.opts.running.slots)
        timing = timing_summary(self.counters.timings, n_slots, wall)
        if timing and self.opts.running.isolation == IsolationName.AUTO:
            timing["passes"] = pass_summaries(self.counters.timings, n_slots, wall)
        boots = boot_summary(list(self.counters.boots.values()),
                             self.runner_spec.adapter.boot_stages)
        if timing and boots:
            timing["boot_split"] = boots
        m = self.manifest
        m.ended_at, m.interrupted, m.wall_s = now_iso(), interrupted, round(wall, 3)
        m.backend, m.timing = described, RunTiming.from_dict(timing)
        self.store.write_manifest(self.manifest)
        return self.manifest

    def set_exit_code(self, code: int) -> None:
        self.manifest.exit_code = code
        self.store.write_manifest(self.manifest)


def _typed_link(block: Any, cls: type[RunLink] = RunLink) -> Any:
    """A link block a sweep gives (``Sweep.links``) typed (as given when it is not a
    mapping, None among them: written as given)."""
    return cls.from_dict(block) if isinstance(block, dict) else block


def timing_summary(timings: list[dict[str, float]], slots: int, wall: float) -> dict[str, float]:
    """Where the wall time went: medians per point, and how busy the slots were.

    ``efficiency`` = Σ(boot + requests + teardown) / (slots × wall): 1.0 means the harness
    added nothing to the irreducible cost and no slot ever idled."""
    if not timings or wall <= 0:
        return {}
    med = {k: statistics.median(t.get(k, 0.0) for t in timings)
           for k in ("boot", "requests", "teardown", "point")}
    busy = sum(t.get("boot", 0.0) + t.get("requests", 0.0) + t.get("teardown", 0.0)
               + t.get("restore", 0.0) for t in timings)
    overhead = [max(0.0, t.get("point", 0.0) - t.get("boot", 0.0) - t.get("requests", 0.0)
                    - t.get("restore", 0.0)) for t in timings]
    restored = [t["restore"] for t in timings if IsolationName.RESTORE in t]
    extra = ({"restored_points": len(restored),
              "median_restore_s": round(statistics.median(restored), 4),
              "sum_restore_s": round(sum(restored), 3)} if restored else {})
    return {
        "points": len(timings), "slots": slots, "wall_s": round(wall, 3),
        "median_boot_s": round(med["boot"], 4), "median_requests_s": round(med["requests"], 4),
        "median_teardown_s": round(med["teardown"], 4),
        "median_point_s": round(med["point"], 4),
        "median_overhead_s": round(statistics.median(overhead), 4),
        "sum_boot_s": round(sum(t.get("boot", 0.0) for t in timings), 3),
        "sum_requests_s": round(sum(t.get("requests", 0.0) for t in timings), 3),
        "sum_teardown_s": round(sum(t.get("teardown", 0.0) for t in timings), 3),
        "efficiency": round(busy / (slots * wall), 4),
        "overhead_fraction": round(sum(overhead) / (slots * wall), 4),
        **extra,
    }


def pass_summaries(timings: list[dict], slots: int, wall: float) -> dict[str, Any]:
    """--isolation auto: the timing of each pass, and what an all-fresh run of the reuse
    pass's points (restore or reset) would have cost (each at the median fresh point, over
    the same slots)."""
    out: dict[str, Any] = {}
    for name in AUTO_PASSES:
        sub = [t for t in timings if t.get("pass") == name]
        if sub:
            out[name] = timing_summary(sub, slots, wall)
    reset, fresh = out.get("restore") or out.get("reset"), out.get("fresh")
    if reset and fresh and fresh.get("median_point_s"):
        estimate = reset["points"] * (fresh["median_point_s"] + fresh["median_teardown_s"]) / slots
        out["all_fresh_estimate_s"] = round(estimate, 1)
        out["ratio_to_all_fresh"] = round(wall / estimate, 3) if estimate else None
    return out


def boot_summary(boots: list[dict], stages: tuple[str, ...] = ()) -> dict[str, Any]:
    """Medians of each server's boot split (the adapter's ``boot_notes``, its
    ``boot_stages``), the first request's extra latency, and how servers started and hit
    the caches; {} without any boot."""
    if not boots:
        return {}
    out: dict[str, Any] = {"servers": len(boots),
                           "launchers": dict(Counter(b.get("launcher") or "?" for b in boots))}
    fallbacks = sorted({b["fallback_reason"] for b in boots if b.get("fallback_reason")})
    if fallbacks:
        out["fallback_reasons"] = fallbacks
    splits = [b["split"] for b in boots if isinstance(b.get("split"), dict)]
    med: dict[str, float] = {}
    for stage in stages:
        vals = [s[stage] for s in splits if s.get(stage) is not None]
        if vals:
            med[stage] = round(statistics.median(vals), 3)
    extra = [b["first_request_extra_s"] for b in boots if b.get("first_request_extra_s") is not None]
    if extra:
        med["first_request_extra_s"] = round(statistics.median(extra), 3)
    med["harness_boot_s"] = round(statistics.median(b.get("boot_s") or 0.0 for b in boots), 3)
    out["median_s"] = med
    caches = Counter(b.get("compile_cache") for b in boots if "compile_cache" in b)
    if caches:
        out["compile_cache"] = {str(k): v for k, v in caches.items()}
    return out
