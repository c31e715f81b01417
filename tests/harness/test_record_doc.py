"""docs/records.md's field table is generated from ``PhaseRecord`` (harness/run/record_doc):
the committed page must be what the generator prints, and every field must have a doc."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run import record_doc
from harness.records.phase_record import PhaseRecord, data_fields

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "records.md"


def test_the_committed_field_table_is_the_generated_one():
    text = DOC.read_text()
    assert record_doc.with_table(text) == text, (
        "docs/records.md's field table differs from PhaseRecord's: run "
        "`python -m harness.run.record_doc --write docs/records.md`")


def test_every_field_is_a_row_in_the_dataclass_order():
    rows = [ln for ln in record_doc.field_table().splitlines()[2:]]
    names = [ln.split("`")[1] for ln in rows]
    assert names == [f.name for f in data_fields()] + list(record_doc.EXTRA_DOCS)
    assert "| `final_chunk` | int, absent when not set |" in record_doc.field_table()
    assert "| `cached_tokens` | int or null |" in record_doc.field_table()


def test_a_field_without_a_doc_cannot_be_rendered(monkeypatch):
    @dataclasses.dataclass
    class Wider(PhaseRecord):
        new_fact: int | None = None
    monkeypatch.setattr(record_doc, "data_fields", lambda: [
        f for f in dataclasses.fields(Wider) if f.name != "extra" and not f.name.startswith("_")])
    with pytest.raises(ValueError, match=r"undocumented \['new_fact'\]"):
        record_doc.field_table()


def test_json_types():
    assert record_doc.json_type("int | None") == "int or null"
    assert record_doc.json_type("dict") == "object"
    assert record_doc.json_type("list[str]") == "list[str]"


def test_the_command_rewrites_a_stale_table(tmp_path):
    stale = DOC.read_text().replace("| `run_id` | str |", "| `run_id` | string |", 1)
    page = tmp_path / "records.md"
    page.write_text(stale)
    run = [sys.executable, "-m", "harness.run.record_doc", "--write", str(page)]
    assert subprocess.run(run, cwd=ROOT, capture_output=True).returncode == 0
    assert page.read_text() == DOC.read_text()
    page.write_text("no table here\n")
    out = subprocess.run(run, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "markers" in out.stderr
