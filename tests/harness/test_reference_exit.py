"""Issue 36: ``--reference cold`` and ``--reference first`` could never exit 0 (a clean
run said "0 clean, 3 unjudged", exit 1), though docs/prompts.md recommends ``cold``. The
cells that are the reference (the cold answers the hits were judged against; the first
configuration's answers) are the measure, not judged: the exit code rests on the judged
cells, and the report says which cells were the reference without calling them ok."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from harness.publish.gate import gate_exit_code, write_junit
from harness.records.phase_record import typed
from harness.records.recordkeys import reference_cells
from tests.harness.test_sweep_cmd import cells, fake_sweep
from tests.reports import synth

pytestmark = pytest.mark.usefixtures("no_leftovers")


def _cold_reference(residues, broken=()):
    cfg = synth.make_config(cudagraph="PIECEWISE")
    out = []
    for r in synth.sweep(cfg, residues, broken=list(broken)):
        if r["phase"] == "cold":
            r = dict(r, verdict="unjudged", reference="cold", reference_sha1=None,
                     reason="no reference to judge against; not collapsed")
        else:
            r = dict(r, reference="cold", reference_sha1=synth.sha1(synth.PASSAGE))
        out.append(r)
    return out


def test_the_gate_counts_the_cells_judged_against_the_reference(tmp_path):
    clean = _cold_reference(range(3))
    assert len(reference_cells(typed(clean))) == 3
    assert gate_exit_code(clean) == 0
    assert gate_exit_code(_cold_reference(range(3), broken=[1])) == 1
    root = ET.parse(write_junit(clean, tmp_path / "j.xml")).getroot()
    skipped = [c.find("skipped").get("message") for c in root.iter("testcase")
               if c.find("skipped") is not None]
    assert len(skipped) == 3 and all(m.startswith("reference: the answer other cells were "
                                                  "judged against (--reference cold)")
                                     for m in skipped)
    # a cold cell no hit was judged against is not a reference: unjudged fails
    alone = [r for r in clean if r["phase"] == "cold"]
    assert not reference_cells(typed(alone)) and gate_exit_code(alone) == 1


def test_a_clean_run_under_reference_cold_exits_0_and_says_what_the_reference_was(
        tmp_path, tok_dir, cli):
    proc = fake_sweep(cli, tok_dir, "--residues", "6,7", "--reference", "cold", check_rc=0)
    c = cells(cli.records())
    assert c[(6, "cold")]["verdict"] == "unjudged" and c[(6, "self-hit")]["verdict"] == "ok"
    out = " ".join(proc.stdout.split())   # prose wraps in 120 columns (issue 50)
    assert "every judged cell ok" in out and "2 of them the reference" in out
    assert "2 clean; the 2 cold cells are the reference (--reference cold), not judged" in out
    assert "276/276, reference" in out and "all ok" not in out
    report = cli.report()
    assert "every judged cell ok" in report and "*276/276, reference*" in report


def test_a_clean_matrix_under_reference_first_exits_0(tmp_path, tok_dir, cli):
    proc = fake_sweep(cli, tok_dir, "--residues", "6", "--reference", "first",
                      "--patches", "none,all", check_rc=0)
    assert "the 1 cold cell" not in proc.stdout
    assert "cold cell is the reference (--reference first), not judged" in " ".join(
        proc.stdout.split())


def test_reference_cold_with_nothing_judged_against_it_fails(tmp_path, tok_dir, cli):
    fake_sweep(cli, tok_dir, "--residues", "6", "--reference", "cold", "--phases", "cold",
               check_rc=1)
