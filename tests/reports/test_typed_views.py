"""Typed boot and timing info: a record's ``server_boot`` (``PhaseRecord.boot``) and a
manifest's ``timing`` (``RunTiming``) read as dataclasses, what they do not name kept."""
from __future__ import annotations

import json
from pathlib import Path

from harness.records.phase_record import PhaseRecord, ServerBoot
from harness.records.run_timing import BootSplit, PassTiming, RunTiming
from tests.reports import synth

ROOT = Path(__file__).resolve().parents[2]


def _rec(**kw) -> PhaseRecord:
    return PhaseRecord.from_dict({**synth.record(synth.make_config(), 4, "cold"), **kw})


def test_server_boot_is_typed_and_its_seconds_fall_back_to_the_records():
    rec = _rec(boot_s=7.5, server_boot={"log": "a.log", "launcher": "forked",
                                        "compile_cache": "hit", "engine_core_spawn_forced": True})
    assert rec.boot == ServerBoot(log="a.log", launcher="forked", boot_s=7.5,
                                  compile_cache="hit",
                                  extra={"engine_core_spawn_forced": True})
    assert _rec(boot_s=7.5, server_boot={"log": "a.log", "boot_s": 3.0}).boot.boot_s == 3.0
    assert _rec(server_boot=None).boot is None
    # reading the view changes nothing written
    raw = {**synth.record(synth.make_config(), 4, "cold"), "server_boot": {"log": "b.log"}}
    assert PhaseRecord.from_dict(raw).as_dict() == raw


def test_run_timing_splits_passes_estimate_and_boot_split():
    m = {"timing": {"wall_s": 90.0, "slots": 2, "points": 10, "median_boot_s": 0.0,
                    "efficiency": 0.8,
                    "passes": {"reset": {"points": 8, "sum_boot_s": 4.0, "median_point_s": 1},
                               "fresh": {}, "all_fresh_estimate_s": 300.0,
                               "ratio_to_all_fresh": 0.3},
                    "boot_split": {"servers": 3, "launchers": {"forked": 3},
                                   "median_s": {"boot_s": 20.0}}}}
    t = RunTiming.of(m)
    assert (t.wall_s, t.slots, t.points, t.extra) == (90.0, 2, 10, {"efficiency": 0.8})
    assert t.passes == {"reset": PassTiming(points=8, sum_boot_s=4.0,
                                            extra={"median_point_s": 1})}
    assert (t.all_fresh_estimate_s, t.ratio_to_all_fresh) == (300.0, 0.3)
    assert t.boot_split == BootSplit(servers=3, launchers={"forked": 3},
                                     median_s={"boot_s": 20.0})
    assert RunTiming.of({"run_id": "x"}) == RunTiming()   # interrupted: no timing


def test_every_committed_manifest_reads_typed():
    manifests = sorted(ROOT.glob("reports/h200/**/*.manifest.json"))
    assert manifests
    shown = [RunTiming.of(json.loads(p.read_text())) for p in manifests]
    assert sum(1 for t in shown if t.boot_split or t.passes) >= 1
