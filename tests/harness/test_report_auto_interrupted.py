"""The report of an interrupted ``--isolation auto`` run (shapes of the H200 runs
20261201-115154-d70a / -d238 on vLLM 0.26.0: reset servers booted once per configuration,
the run stopped by SIGINT before most fresh confirmations ran), on synthetic records
written to JSONL and read back through harness.records.store like a real results file."""
from __future__ import annotations

import json
import statistics

import pytest

from harness.report import render_markdown
from harness.report.engine_notice import LAB_NOTICE
from harness.records.store import load_manifest_for, load_records
from tests.reports import synth

RUN = "20261201-115154-d70a"
FULL = synth.make_config(spec="dflash2", k=7)
PIECEWISE = synth.make_config(spec="dflash2", k=7, cudagraph="PIECEWISE")
RESET_BOOTS = {FULL["cudagraph_mode"]: 272.3774, PIECEWISE["cudagraph_mode"]: 269.2375}
FRESH_BOOTS = [62.0388, 57.0202, 59.5556]   # residues 7, 8, 9 of FULL on fresh servers


def _auto(r: dict, isolation: str, log: str, boot_s: float, confirms: str | None = None) -> dict:
    r.update(isolation=isolation, isolation_run="auto", boot_s=boot_s,
             server_boot={"log": log, "launcher": "plain", "boot_s": boot_s})
    if confirms:
        r["confirms"] = confirms
    return r


def _records(with_boot_notes: bool = True) -> list[dict]:
    recs = []
    for cfg in (FULL, PIECEWISE):
        boot = RESET_BOOTS[cfg["cudagraph_mode"]]
        log = f"{synth.config_id(cfg)}-r000-gpu0-1.log"
        recs += [_auto(r, "reset", log, boot)
                 for r in synth.sweep(cfg, range(16), run_id=RUN)]
    for res, boot in zip((7, 8, 9), FRESH_BOOTS):   # only FULL got fresh points
        log = f"{synth.config_id(FULL)}-r{res:03d}-gpu0-{res}.log"
        recs += [_auto(r, "fresh", log, boot, "rule neighbourhood")
                 for r in synth.sweep(FULL, [res], run_id=RUN)]
    if not with_boot_notes:   # records written before server_boot existed
        for r in recs:
            r.pop("server_boot")
    return recs


def _manifest(recs: list[dict], *, interrupted: bool) -> dict:
    m = synth.manifest_for(recs, interrupted=interrupted, residues=list(range(16)))
    m.update(run_id=RUN, isolation="auto", auto_sample=2, documents=[0])
    reset_points, fresh_points = 32, len(FRESH_BOOTS)
    m["timing"] = {   # as harness/run/driver.timing_summary writes it: per point
        "points": reset_points + fresh_points, "slots": 6, "wall_s": 533.146,
        "median_boot_s": 0.0,
        "passes": {
            "reset": {"points": reset_points, "median_boot_s": 0.0,
                      "sum_boot_s": round(sum(RESET_BOOTS.values()), 3),
                      "median_requests_s": 0.5325},
            "fresh": {"points": fresh_points, "median_boot_s": statistics.median(FRESH_BOOTS),
                      "sum_boot_s": round(sum(FRESH_BOOTS), 3), "median_requests_s": 1.3361},
            "all_fresh_estimate_s": 360.5, "ratio_to_all_fresh": 0.093,
        },
    }
    return m


def _render(tmp_path, *, interrupted: bool = True, with_boot_notes: bool = True) -> str:
    recs = _records(with_boot_notes)
    path = synth.write_jsonl(tmp_path / f"{RUN}.jsonl", recs)
    (tmp_path / f"{RUN}.manifest.json").write_text(
        json.dumps(_manifest(recs, interrupted=interrupted)))
    return render_markdown(load_records([path]), [load_manifest_for(path)])


def _auto_line(md: str, cfg: dict) -> str:
    section = md.split(f"### `{synth.label(cfg)}`", 1)[1].split("\n### ", 1)[0]
    return next(line for line in section.splitlines() if line.startswith("- **Isolation auto:**"))


def _timing_row(md: str, name: str) -> str:
    """The value cell of the Timing row ``RUN: name`` (padding stripped)."""
    row = next(line for line in md.splitlines() if line.startswith(f"| {RUN}: {name} "))
    return row.split("|")[2].strip()


def test_a_configuration_without_fresh_points_says_none_ran_and_why(tmp_path):
    md = _render(tmp_path)
    line = _auto_line(md, PIECEWISE)
    assert "fresh servers for  (" not in line
    assert line == (f"- **Isolation auto:** no fresh server ran for this configuration before "
                    f"run `{RUN}` was interrupted; any fresh points planned for it did not run "
                    "(the plan per configuration is not recorded); every cell shows its reset "
                    "verdict only.")
    full = _auto_line(md, FULL)
    assert full.startswith("- **Isolation auto:** fresh servers for 3 rule neighbourhood "
                           "(points); Reset vs fresh (`--isolation auto`): 6 cells measured")
    assert full.endswith(f"Run `{RUN}` was interrupted: fresh points planned for this "
                         "configuration may not all have run (the plan per configuration is "
                         "not recorded).")


def test_a_finished_run_without_fresh_points_says_none_was_planned(tmp_path):
    md = _render(tmp_path, interrupted=False)
    assert _auto_line(md, PIECEWISE) == (
        "- **Isolation auto:** no fresh server ran for this configuration and the run "
        "finished, so none was planned; every cell shows its reset verdict only.")
    assert "was interrupted" not in _auto_line(md, FULL)


def test_median_boot_is_over_the_servers_that_booted(tmp_path):
    md = _render(tmp_path)
    reset_median = statistics.median(RESET_BOOTS.values())
    all_median = statistics.median([*RESET_BOOTS.values(), *FRESH_BOOTS])
    assert _timing_row(md, "wall") == (
        f"533.146 s over 6 slot(s), 35 points, 5 servers booted, median boot "
        f"{round(all_median, 2):g} s per server")
    reset = _timing_row(md, "reset pass")
    assert "median boot 0 s" not in reset
    assert reset == (f"32 points, 541.615 s booting in all, 2 servers booted, median boot "
                     f"{round(reset_median, 2):g} s per server, median requests 0.5325 s")
    assert (f"3 points, {round(sum(FRESH_BOOTS), 3):g} s booting in all, 3 servers booted, "
            f"median boot {round(statistics.median(FRESH_BOOTS), 2):g} s per server") in (
        _timing_row(md, "fresh pass"))
    # the all-fresh estimate is the driver's (every reset point at the median fresh point)
    assert _timing_row(md, "all-fresh estimate").startswith(
        "360.5 s (every reset point at the median fresh point)")


def test_without_boot_notes_the_per_point_median_says_what_it_is(tmp_path):
    md = _render(tmp_path, with_boot_notes=False)
    assert "median boot 0 s per point (0 on a reused server)" in _timing_row(md, "reset pass")
    assert _timing_row(md, "wall") == ("533.146 s over 6 slot(s), 35 points, median boot 0 s "
                                       "per point (0 on a reused server)")


@pytest.mark.parametrize("interrupted", [True, False])
def test_the_opening_summary_says_the_run_was_interrupted(tmp_path, interrupted):
    md = _render(tmp_path, interrupted=interrupted)
    opening = md.split("## Results", 1)[0].splitlines()
    assert opening[2] == LAB_NOTICE   # the engine notice still opens the report
    line = (f"**Interrupted:** run `{RUN}` (35 points finished) did not finish (a point is "
            "one residue, document and pass; how many points were planned is not recorded); "
            "a cell without a fresh confirmation shows its reset verdict only.")
    assert (line in opening) is interrupted
    assert ("Interrupted:" in "\n".join(opening)) is interrupted


def test_a_pass_of_one_point_says_point(tmp_path):
    recs = [r for r in _records() if r["isolation"] == "reset" or r["residue"] == 7]
    m = _manifest(recs, interrupted=True)
    m["timing"]["passes"]["fresh"].update(points=1, sum_boot_s=FRESH_BOOTS[0])
    row = _timing_row(render_markdown(recs, [m]), "fresh pass")
    assert row.startswith(f"1 point, {FRESH_BOOTS[0]:g} s booting in all, 1 server booted, "
                          f"median boot {round(FRESH_BOOTS[0], 2):g} s per server")


def test_an_interrupted_run_without_auto_says_what_is_missing(tmp_path):
    recs = synth.sweep(FULL, range(4), run_id=RUN)
    md = render_markdown(recs, [synth.manifest_for(recs, interrupted=True)])
    assert (f"**Interrupted:** run `{RUN}` (4 points finished) did not finish (how many "
            "points were planned is not recorded); points not on disk were not measured."
            ) in md.split("## Results", 1)[0]
    assert "Isolation auto" not in md


def test_finished_points_fall_back_to_the_records_without_timing(tmp_path):
    recs = _records()
    m = _manifest(recs, interrupted=True)
    del m["timing"]
    md = render_markdown(recs, [m])
    assert f"**Interrupted:** run `{RUN}` (35 points finished) did not finish" in md
    assert "## Timing" not in md


def test_with_a_recorded_plan_the_lines_count_what_did_not_run(tmp_path):
    # Runs since the driver records its plan (manifest "plan"): the numbers, not "unknown".
    recs = _records()
    path = synth.write_jsonl(tmp_path / f"{RUN}.jsonl", recs)
    m = _manifest(recs, interrupted=True)
    m["plan"] = {"points": 41, "by_config": {synth.config_id(FULL): {"reset": 16, "fresh": 7},
                                             synth.config_id(PIECEWISE): {"reset": 16, "fresh": 2}}}
    (tmp_path / f"{RUN}.manifest.json").write_text(json.dumps(m))
    md = render_markdown(load_records([path]), [load_manifest_for(path)])
    assert f"run `{RUN}` (35 of 41 planned points finished) did not finish" in md
    assert "is not recorded" not in md
    assert _auto_line(md, PIECEWISE) == (
        f"- **Isolation auto:** no fresh server ran for this configuration before run `{RUN}` "
        "was interrupted; 2 of 2 planned fresh points did not run; every cell shows its reset "
        "verdict only.")
    assert _auto_line(md, FULL).endswith(
        f"Run `{RUN}` was interrupted: 4 of 7 planned fresh points did not run.")


def test_an_unjudged_pass_is_no_disagreement():
    # issue 23 item 6: "⚠ reset unjudged, fresh ok" in the table while the agreement line
    # said 0 disagree; an unjudged answer compares with nothing, and the line counts it
    from harness.report import render_markdown
    from tests.reports.synth import make_config, record
    cfg = make_config(cudagraph="PIECEWISE")
    recs = []
    for res in (3, 4):
        for iso, verdict in (("reset", "unjudged" if res == 4 else "ok"), ("fresh", "ok")):
            r = record(cfg, res, "self-hit", verdict=verdict, isolation=iso)
            recs.append(dict(r, isolation_run="auto", document_seed=0,
                             confirms="sample" if iso == "fresh" else None))
    md = render_markdown(recs)
    assert "⚠" not in md
    assert ("1 cell measured on both (1 more on both passes not compared: unjudged, "
            "boot-fail, invalid or infra on one or both), 1 agree (1 both ok, 0 both not ok), "
            "0 disagree") in md
