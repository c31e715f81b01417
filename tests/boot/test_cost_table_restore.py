"""The cost table's issue-51 section from records alone: the pool, the copy bandwidth the
worker measured, the limit it allows (one write and one read of the pool), each fill's
ratio to it, the dirty restore's share of the point, which ran and the audits."""
from __future__ import annotations

from benchmarks.cost_table import NOTE, restore_lines, table

GiB = 2**30


def _recs(dirty_means="dirty", audit_ok=True) -> list[dict]:
    rec = lambda kind, **f: {"cost_only": True, "note": NOTE, "kind": kind,   # noqa: E731
                             "server": "27b@20", **f}
    out = [rec("boot", boot_s=200.0, params=24e9, kv_gib=20, how="plain"),
           rec("bandwidth", result={"bytes_per_s": 3.0e12, "device": "NVIDIA H100 80GB HBM3"}),
           rec("storage_fill", round=0, s=0.05, result={"s": 0.04, "restored": {"bytes": 20 * GiB}})]
    for r in range(1, 4):
        out += [rec("point", round=r, s=1.5, phases={"cold": {"s": 1.0}, "self-hit": {
                    "s": 0.5, "cached_tokens": 1024}}),
                rec("fill", round=r, s=0.3, proven=True, result={"s": 0.28, "regions": {
                    "state": {"bytes": 50 * GiB}, "kv": {"bytes": 23 * GiB}}}),
                rec("storage_fill", round=r, s=0.03, proven=True,
                    result={"s": 0.02, "ok": True, "restored": {"bytes": 20 * GiB}}),
                rec("dirty_restore", round=r, s=0.006, proven=True, result={
                    "s": 0.002, "ok": True, "means": dirty_means, "why": None,
                    "audit": {"ok": audit_ok} if r == 3 else None,
                    "restored": {"bytes": 12 << 20, "blocks": 5}})]
    return out + [rec("audit", result={"ok": True})]


def test_the_limit_and_the_ratios_come_from_the_records():
    text = "\n".join(restore_lines(_recs(), {"27b@20": {"point": (1.5, 1.5, 1.5, 3)}}))
    limit_ms = 2 * 20 * GiB / 3.0e12 * 1e3            # 14.3 ms
    assert f"| {limit_ms:.3g} |" in text and "| NVIDIA H100 80GB HBM3 | 20 | 3,000 |" in text
    assert f"| {0.02 / (limit_ms / 1e3):.2f}× |" in text                     # 1.40×
    assert "27b@20: dirty restore (the call, proof and prefix reset included) 0.40% of the " \
           "point (met: ≤ 1%; of its 6.0 ms the worker's 2.0 ms, the HTTP calls the rest)" in text
    assert "27b@20: once-per-storage fill and proof 1.40× the bandwidth limit (met: ≤ 2×)" in text
    assert "| dirty: 3 | 6/6 | 2/2 |" in text


def test_a_failed_audit_and_the_whole_fill_standing_in_are_shown():
    text = "\n".join(restore_lines(_recs("storage-fill", audit_ok=False),
                                   {"27b@20": {"point": (1.5, 1.5, 1.5, 3)}}))
    assert "| storage-fill: 3 |" in text and "| 1/2 |" in text


def test_records_before_issue_51_render_as_they_did():
    old = [r for r in _recs() if r["kind"] in ("boot", "point", "fill")]
    assert restore_lines(old, {}) == [] and "speed of memory" not in table(old)
