"""Every committed record (test fixtures, the H200 archives and phase 2) loads into the
typed model of harness/records/phase_record.py and round-trips unchanged, key order included: old
records are schema version 1, and nothing about them changes when read."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.records.phase_record import SCHEMA_VERSION, PhaseRecord, schema_of
from harness.records.recordkeys import cell_key
from harness.records.store import load_records, read_jsonl, read_phase_records

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ("tests/**/fixtures/**/*.jsonl*", "reports/h200/results/*.jsonl.gz",
            "reports/h200/phase2/**/*.jsonl*")
FILES = sorted({p for pat in PATTERNS for p in ROOT.glob(pat)})


def test_there_are_committed_records():
    assert len(FILES) >= 10


# the largest archives (1-6 s each on the 2-core box) are left to the full suite: the quick
# subset still round-trips every smaller one, of every schema version
BIG_ARCHIVE = 300_000


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow)
                                  if p.stat().st_size > BIG_ARCHIVE else p for p in FILES],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_records_load_and_round_trip(path):
    records = read_jsonl(path)
    assert records
    typed = read_phase_records(path)
    assert len(typed) == len(records)
    for r, rec in zip(records, typed):
        assert rec == PhaseRecord.from_dict(r)
        assert rec.schema_version == schema_of(r) < SCHEMA_VERSION + 1
        out = rec.as_dict()
        assert out == r and list(out) == list(r)   # nothing lost, nothing added, same order
        assert json.dumps(out) == json.dumps(r)


def test_the_store_reads_phase_records_the_latest_of_each_cell():
    refs = [p for p in FILES if "reports/h200/results" in str(p)][:3]
    latest: dict[tuple, dict] = {}
    for ref in refs:                                     # the lines as written, in order
        for d in read_jsonl(ref):
            latest[(d["run_id"],) + cell_key(PhaseRecord.from_dict(d))] = d
    typed = load_records(refs)
    assert typed and all(type(t) is PhaseRecord for t in typed)
    assert [t.as_dict() for t in typed] == list(latest.values())


def _v1() -> dict:
    return {"run_id": "r", "config_id": "c", "config": {}, "residue": 4, "phase": "cold",
            "verdict": "broken", "ray_node_id": "abc", "answer": ""}


def test_an_old_record_reads_with_defaults_and_keeps_unknown_keys():
    rec = PhaseRecord.from_dict(_v1())
    assert rec.schema_version == 1                      # written before the field
    assert rec.harness_version is None and rec.verbatim_n is None   # lacked: defaults
    assert rec.log_excerpt == [] and rec.content_was_null is False
    assert rec.extra == {"ray_node_id": "abc"}          # unknown: kept, not dropped
    assert rec.as_dict() == _v1() and list(rec.as_dict()) == list(_v1())


def test_a_field_set_after_reading_is_written_after_the_keys_read():
    rec = PhaseRecord.from_dict(_v1())
    rec.verdict, rec.reason = "ok", "judged again"
    out = rec.as_dict()
    assert out["verdict"] == "ok" and list(out)[-1] == "reason"
    assert "schema_version" not in out and "harness_version" not in out


def test_a_new_record_is_written_in_the_models_order_without_unset_optional_fields():
    rec = PhaseRecord.from_dict({**_v1(), "schema_version": SCHEMA_VERSION})
    fresh = PhaseRecord(**{k: getattr(rec, k) for k in (
        "run_id", "harness_version", "config_id", "config_label", "config",
        "requested_config", "config_mismatch", "engine", "engine_version", "patches",
        "patch_status", "model", "slot", "node", "isolation", "residue", "modulus",
        "target_len", "templated_len", "templated_len_source", "phase", "reference",
        "boot_s", "started_at", "rerun")})
    out = fresh.as_dict()
    assert list(out)[:3] == ["run_id", "harness_version", "config_id"]
    assert "case_id" not in out and "load" not in out and out["first_divergence"] is None


def test_records_are_read_with_the_collector_paused_and_it_is_restored():
    """``gc_paused``: parsed records hold no cycles, so the collector is off while they are
    built (5-6x faster on the logprob-heavy archives) and back as it was after, also when
    the file is not a results file."""
    import gc
    from harness.records.record_check import RecordFileError, gc_paused, read_record_file
    seen = []
    with gc_paused():
        seen.append(gc.isenabled())
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()   # off before: left off
    finally:
        gc.enable()
    with pytest.raises(RecordFileError):
        read_record_file(Path(__file__))   # this test file: not JSON lines
    assert gc.isenabled()
    assert read_jsonl(FILES[0]) and gc.isenabled()
