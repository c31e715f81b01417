"""Readers that type the records of a file the user names (a golden run, an explain run
linked to a report) turn a record the model refuses (a verdict or phase it does not know)
into one line and exit 2, never a traceback."""
from __future__ import annotations

import json

from tests.conftest import one_line_exit_2
from tests.reports import synth


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_golden_run_with_an_unknown_verdict_is_one_line(tmp_path, tok_dir, cli):
    rec = dict(synth.record(synth.make_config(), 1, "cold"), verdict="fine")
    gold = _write(tmp_path / "gold.jsonl", [rec])
    proc = cli("--engine", "cmd", "--model", tok_dir, "--server-cmd", "true {port}",
               "--reference", f"golden:{gold}", "--out", tmp_path / "r", timeout=60)
    one_line_exit_2(proc, "golden run", "unknown verdict 'fine'")


def test_a_linked_explain_run_with_an_unknown_phase_is_one_line(tmp_path, cli):
    parent = synth.record(synth.make_config(), 4, "self-hit", run_id="P")
    _write(tmp_path / "P.jsonl", [parent])
    (tmp_path / "P.manifest.json").write_text(json.dumps({"run_id": "P"}))
    rerun = dict(parent, run_id="E", phase="lukewarm")
    _write(tmp_path / "E.jsonl", [rerun])
    (tmp_path / "E.manifest.json").write_text(json.dumps(
        {"run_id": "E", "explains": {"run_id": "P", "targets": []}}))
    proc = cli("report", tmp_path / "P.jsonl", "-o", tmp_path / "r.md", timeout=60)
    one_line_exit_2(proc, "explain run", "unknown phase 'lukewarm'")
    # the same report without the broken explain run renders
    (tmp_path / "E.manifest.json").unlink()
    assert cli("report", tmp_path / "P.jsonl", "-o", tmp_path / "r.md", timeout=60).returncode == 0
