"""What a restore by the dirty set leaves in the record and the report (issue 51): the
fill's ``restored`` (which ran, why, bytes, blocks, the audit), an audit that fails makes
the fill unproven, and the restore row says what was restored."""
from __future__ import annotations

from harness.report.restore import restored_phrase
from harness.serve.poison import proven, restored


def _proof(means="dirty", audit=None, why=None) -> dict:
    region = {"bytes": 64, "checksum": 0, "expected": 0, "ok": True}
    return {"ok": True, "means": means, "why": why, "audit": audit,
            "regions": {"pool": dict(region), "builders": dict(region)},
            "restored": {"bytes": 3 << 20, "blocks": 12, "storages": 16}}


def test_a_dirty_restore_is_proven_by_its_regions_and_its_audit():
    assert proven(_proof())
    assert proven(_proof(audit={"ok": True, "checksum": 5, "expected": 5}))
    assert not proven(_proof(audit={"ok": False, "checksum": 5, "expected": 6}))
    assert not proven(_proof(audit={"ok": True, "checksum": 5, "expected": 6}))
    assert not proven({**_proof(), "regions": {"pool": _proof()["regions"]["pool"]}})


def test_the_record_keeps_what_was_restored():
    assert restored(_proof(audit={"ok": True, "checksum": 1, "expected": 1})) == {
        "means": "dirty", "why": None, "bytes": 3 << 20, "blocks": 12, "audit": True}
    assert restored({"ok": True, "regions": {}}) is None      # the per-view fill's proof


def test_the_restore_row_says_what_was_restored():
    rows = [{"restored": restored(_proof())} for _ in range(3)]
    rows.append({"restored": restored(_proof(audit={"ok": True, "checksum": 1, "expected": 1}))})
    rows.append({"restored": {"means": "storage-fill", "why": "no step was seen since the "
                              "last restore", "bytes": 1 << 30, "blocks": "all", "audit": None}})
    assert restored_phrase(rows) == (
        "dirty (the blocks the point was given) on 4 points, median 12 blocks, 3 MiB; "
        "every storage on 1 (no step was seen since the last restore); "
        "whole-pool audits 1/1 proven")
    assert restored_phrase([{"means": "reset+poison-fill"}]) == ""
