"""compare_records / render_compare_markdown between two recorded runs."""
from __future__ import annotations

import json

from . import synth
from .gfm import gfm_tables
from harness.publish.compare import compare_records, render_compare_markdown
from harness.records.store import load_records

FULL = synth.make_config()
PIECEWISE = synth.make_config(cudagraph="PIECEWISE")


def test_statuses_per_configuration_and_residue(write_run):
    old = synth.sweep(FULL, range(0, 10), broken=[4, 6], run_id="old")
    new = synth.sweep(FULL, range(2, 14), broken=[6, 7, 12], run_id="new")
    cmp = compare_records(load_records([write_run("old", old)]),
                          load_records([write_run("new", new)]))
    res = cmp.as_dict()
    json.dumps(res)  # machine-readable: plain JSON (sweep compare --json)
    assert res["summary"] == {"regressed": 1, "fixed": 1, "still_broken": 1,
                              "newly_covered": 4, "no_longer_covered": 2, "unchanged_ok": 5}
    (cfg,) = res["configs"]
    by = {p["residue"]: p["status"] for p in cfg["points"]}
    assert by[4] == "fixed" and by[6] == "still_broken" and by[7] == "regressed"
    assert by[12] == "newly_covered" and by[0] == "no_longer_covered" and by[3] == "unchanged_ok"
    assert [(r["residue"], r["phase"], r["old_verdict"], r["new_verdict"], r["sha1"])
            for r in res["regressions"]] == [(7, "self-hit", "ok", "broken", "da39a3ee5e6b")]
    assert not res["ok"] and res["regressed"] == 1

    md = render_compare_markdown(cmp)
    assert "**1 regression**" in md
    assert "- **regressed**: residue 7" in md
    assert "- newly covered: residues 10–13 (not ok now: residue 12)" in md
    t = gfm_tables(md)[0]
    rows = {r[0]: r[1:] for r in t["rows"]}
    assert rows["residue 7"][0] == "regressed"
    assert rows["residue 7"][2] == "794/794 → broken da39a3ee5e6b"
    assert "residue 3" not in rows  # unchanged ok rows are counted, not listed
    assert "sweep --spec mtp --ctx huge --residues 7" in md


def test_configurations_match_by_id_then_label():
    old = synth.sweep(FULL, [4], broken=[4], run_id="old") + synth.sweep(PIECEWISE, [4], run_id="old")
    new = synth.sweep(PIECEWISE, [4], broken=[4], run_id="new")
    for r in new:  # a harness that hashes identities differently: ids differ, label matches
        r["config_id"] = "ffffffffffff"
    res = compare_records(old, new).as_dict()
    by_label = {c["config_label"]: c for c in res["configs"]}
    pw = by_label[synth.label(PIECEWISE)]
    assert pw["matched_by"] == "config_label"
    assert pw["points"][0]["status"] == "regressed"
    assert by_label[synth.label(FULL)]["matched_by"] == "old only"
    assert by_label[synth.label(FULL)]["points"][0]["status"] == "no_longer_covered"


def test_phase_level_regression_inside_a_still_broken_point():
    old = [synth.record(FULL, 4, "cold"), synth.collapse(FULL, 4, "self-hit")]
    new = [synth.collapse(FULL, 4, "cold"), synth.collapse(FULL, 4, "self-hit")]
    res = compare_records(old, new).as_dict()
    assert res["configs"][0]["points"][0]["status"] == "regressed"
    assert res["configs"][0]["points"][0]["regressed_phases"] == ["cold"]


def test_identical_runs_compare_clean():
    recs = synth.sweep(FULL, range(128), broken=[4])
    cmp = compare_records(recs, recs)
    res = cmp.as_dict()
    assert res["ok"] and res["summary"]["still_broken"] == 1 and res["summary"]["unchanged_ok"] == 127
    assert "no regressions" in render_compare_markdown(cmp)


def test_before_and_after_a_fix_match_apart_from_the_patch_set():
    fixed_cfg = synth.make_config(patches="all")
    old = synth.sweep(FULL, range(8), broken=[4], run_id="unpatched")
    new = synth.sweep(fixed_cfg, range(8), run_id="patched")
    cmp = compare_records(old, new)
    res = cmp.as_dict()
    (cfg,) = res["configs"]
    assert cfg["matched_by"] == "configuration except patches"
    assert res["summary"]["fixed"] == 1 and res["summary"]["unchanged_ok"] == 7
    md = render_compare_markdown(cmp)
    assert "the same configuration apart from the patch set" in md
    rows = {r[0]: r[1] for r in gfm_tables(md)[0]["rows"]}
    assert rows == {"residue 4": "fixed"}
