"""The ladder read back from an explain run's manifest and records (``report.explained``):
how each rung's outcome is named, without servers."""
from __future__ import annotations

from harness.records.phase_record import PhaseRecord, typed
from harness.report.explained import UNCHANGED, closing_line, ladders, render_explained


def rec(cid: str, verdict: str, phase: str = "self-hit", **cfg) -> dict:
    return {"config_id": cid, "residue": 4, "phase": phase, "verdict": verdict,
            "verbatim_n": 10, "verbatim_total": 10, "started_at": "2026-12-01T00:00:00",
            "computed_tail": 4, "templated_len": 4100, "config": cfg, "reason": "r"}


def manifest(rungs: list[dict]) -> dict:
    return {"run_id": "child", "explains": {"run_id": "parent", "targets": [
        {"config_id": "base", "config_label": "SPEC=mtp", "residue": 4,
         "phases": {"self-hit": "broken"}, "rungs": rungs}]}}


RUNGS = [{"label": UNCHANGED, "axis": UNCHANGED, "config_id": "u"},
         {"label": "graph mode → PIECEWISE", "axis": "graph mode", "config_id": "g"},
         {"label": "k → 2", "axis": "k", "config_id": "k2"},
         {"label": "k → 4", "axis": "k", "config_id": "k4"},
         {"label": "block size → 16", "axis": "block size", "config_id": "b"},
         {"label": "patches → all", "axis": "patches", "config_id": "p"},
         {"label": "spec → none", "axis": "spec", "note": "the cell already runs with it"}]


def test_each_outcome_is_named_for_what_it_is():
    records = [rec("u", "broken"), rec("g", "ok"), rec("k2", "ok"), rec("k4", "broken"),
               rec("b", "broken"), rec("p", "boot-fail")]
    (lad,) = ladders(manifest(RUNGS), typed(records))
    assert lad.reproduced
    line = closing_line(lad)
    assert "each alone cleans residue 4 self-hit): graph mode, k → 2." in line
    assert "Not discriminators (the cell stays broken): k → 4, block size." in line
    assert "Inconclusive (the rerun could not judge the cell): patches." in line
    assert "Not run: spec → none (the cell already runs with it)." in line


def test_a_rung_that_moved_the_unit_but_not_the_tail_is_neither():
    records = [rec("u", "broken", prefix_match_unit=128),
               rec("g", "broken", effective_hash_unit=2048)]
    (lad,) = ladders(manifest(RUNGS[:2]), typed(records))
    line = closing_line(lad)
    assert "Discriminators** (each alone cleans residue 4 self-hit): none." in line
    assert "Not discriminators (the cell stays broken): none." in line
    assert "graph mode → PIECEWISE: the hit unit went 128 → 2048" in line


def test_not_reproduced_names_nothing_and_the_section_says_whose():
    records = [rec("u", "ok"), rec("g", "ok")]
    m = manifest(RUNGS[:2])
    (lad,) = ladders(m, typed(records))
    assert not lad.reproduced
    line = closing_line(lad)
    assert line.startswith("**Not reproduced: residue 4 self-hit came back self-hit ok")
    assert "Discriminators" not in line
    section = render_explained([(m, typed(records))])
    assert section.startswith("## Explained") and "Explain run: `child`" in section
    assert render_explained([({"run_id": "x"}, typed(records))]) == ""   # not an explain run


def test_an_unchanged_rerun_that_could_not_judge_reproduces_nothing():
    # issue 23 item 2: boot-fail / timeout / invalid / unjudged is not "Reproduced"
    for verdict in ("boot-fail", "timeout", "invalid", "unjudged"):
        records = [rec("u", verdict), rec("g", "ok")]
        (lad,) = ladders(manifest(RUNGS[:2]), typed(records))
        assert not lad.reproduced, verdict
        line = closing_line(lad)
        assert line.startswith(f"**Inconclusive: residue 4 self-hit came back self-hit {verdict}")
        assert "Discriminators" not in line
    (lad,) = ladders(manifest(RUNGS[:2]), typed([rec("u", "diverged"), rec("g", "ok")]))
    assert lad.reproduced   # broken and diverged are one family


def test_each_document_reads_its_own_reruns():
    m = manifest(RUNGS[:2])
    t0 = m["explains"]["targets"][0]
    m["explains"]["targets"] = [dict(t0, document=0), dict(t0, document=1)]
    records = [dict(rec("u", "broken"), document_seed=0), dict(rec("g", "broken"), document_seed=0),
               dict(rec("u", "broken"), document_seed=1), dict(rec("g", "ok"), document_seed=1)]
    lad0, lad1 = ladders(m, typed(records))
    assert (lad0.where, lad1.where) == ("document 0", "document 1")
    assert "Not discriminators (the cell stays broken): graph mode." in closing_line(lad0)
    assert "cleans residue 4 self-hit): graph mode." in closing_line(lad1)


def test_a_boot_timeout_cell_says_the_reason_not_a_log_warning():
    # issue 23 item 10: the H200's explain cells showed a ulimit warning (it names
    # OSError) from the server log instead of why the boot failed
    from harness.report.cells import cell_phrase
    r = dict(rec("u", "boot-fail"), reason="not healthy after 320s, still running; last log "
             "line: Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 40%",
             log_excerpt=["WARNING Found ulimit of 1024 ... fd limit errors like `OSError: "
                          "[Errno 24] Too many open files`", "Capturing CUDA graphs: 40%"])
    phrase = cell_phrase(PhaseRecord.from_dict(r))
    assert phrase.startswith("boot-fail: not healthy after 320s, still running") and \
        "ulimit" not in phrase, phrase
    died = dict(r, reason="server exited with code 1 during boot: ValueError: bad")
    died["log_excerpt"] = ["WARNING ulimit", "ValueError: bad"]
    assert cell_phrase(PhaseRecord.from_dict(died)) == "boot-fail: ValueError: bad"
