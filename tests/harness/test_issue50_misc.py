"""Issue 50 items 2 and 6, what a new user found: ``sweep explain`` wrote its report to
``results/`` (docs/flags.md: ``reports/``); the lab's ``--help`` said "(default: lab-copy)
(default: None)"; auto's headline said "1 point not ok (4 cells)" (it counted records);
a report embedded the machine's own model path."""
from __future__ import annotations

import re

import pytest

from engine.lab.cli import build_parser
from harness.report.render import headline_markdown
from harness.records.phase_record import typed
from tests.reports import synth


def test_the_lab_help_says_each_default_once_and_never_none():
    text = build_parser().format_help()
    assert "(default: None)" not in text
    assert "(default: lab-copy)" in text and text.count("(default: lab-copy)") == 1
    assert "(default: 127.0.0.1)" in text   # a default the help does not say is still added


def _auto_records() -> list[dict]:
    cfg = synth.make_config()
    out = []
    for iso in ("restore", "fresh"):
        for doc in (0, 1):
            out += [dict(r, isolation_run="auto", document_seed=doc)
                    for r in synth.sweep(cfg, range(3), broken=[1], isolation=iso)]
    return out


def test_the_headline_counts_the_tables_cells_and_says_the_records_beside():
    recs = typed(_auto_records())
    assert len(recs) == 24
    line = headline_markdown(recs)
    assert line.startswith("1 configuration, 3 data points, 6 phase cells (24 records): "), line
    assert "1 point not ok (1 cell)" in line, line
    one = typed(synth.sweep(synth.make_config(), range(3), broken=[1]))
    assert headline_markdown(one).startswith("1 configuration, 3 data points, 6 phase cells: ")


@pytest.mark.parametrize("path, shown", [
    ("/home/alice/src/residue-lab/engine/lab/model", "engine/lab/model"),
    ("/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/0a1b", "Qwen/Qwen3-8B"),
    ("/home/alice/models/qwen-27b", "qwen-27b"),
    ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),
    ("engine/tinymodel/weights/hybrid", "engine/tinymodel/weights/hybrid")])
def test_a_report_names_a_model_without_the_machines_folders(path, shown):
    from harness.report.model import shown_model
    assert shown_model(path) == shown


def test_no_regenerated_lab_report_embeds_a_local_model_path():
    """The lab reproductions (reports/regenerate.sh); the GPU archives kept as they came
    back (reports/h200: no records to render them again) say what they said."""
    from tests.conftest import ROOT
    found = [p.name for p in (ROOT / "reports").glob("*.md")
             if re.search(r"model=/(work|home|root|tmp)/", p.read_text())]
    assert found == []


@pytest.mark.slow
def test_explain_writes_its_report_to_reports_as_the_docs_say(cli, tmp_path):
    """No --out: the sweep's report and the explain run's both land in reports/."""
    args = ("--model", cli.lab_model(), "--residues", "4", "--cudagraph",
            "FULL_AND_PIECEWISE", "--patches", "none", "--slots", "2", "--no-progress")
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    run_id = re.search(r"run (\d{8}-\d{6}-[0-9a-f]{4})", proc.stderr).group(1)
    proc = cli("explain", run_id, "--slots", "2", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.parent.name for p in tmp_path.rglob("*.md")) == ["reports", "reports"]
