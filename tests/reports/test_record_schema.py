"""Every committed record (test fixtures, the H200 archives and phase 2) loads into the
typed model of harness/run/records.py and round-trips unchanged: old records are
schema version 1, and nothing about them changes when read."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.run.records import SCHEMA_VERSION, PhaseRecord, schema_of
from harness.store import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ("tests/**/fixtures/**/*.jsonl*", "reports/h200/results/*.jsonl.gz",
            "reports/h200/phase2/**/*.jsonl*")
FILES = sorted({p for pat in PATTERNS for p in ROOT.glob(pat)})


def test_there_are_committed_records():
    assert len(FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_records_load_and_round_trip(path):
    records = read_jsonl(path)
    assert records
    for r in records:
        rec = PhaseRecord.from_dict(r)
        assert rec.schema_version == schema_of(r) < SCHEMA_VERSION + 1
        out = rec.to_dict()
        out.pop("schema_version")
        assert out == {k: v for k, v in r.items() if k != "schema_version"}
