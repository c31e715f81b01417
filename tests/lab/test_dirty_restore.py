"""The lab's restore by what a point wrote (engine/lab/poison.py, issue 51): it refills only
the rows and blocks the point's requests were given, gives the same memory as the whole
fill, and its audit catches a write outside the tracked set."""
from __future__ import annotations

import numpy as np

from engine.lab.config import MODEL_DIR, LabConfig
from engine.lab.engine_core import EngineCore
from engine.lab.request import Request
from engine.lab.tokenizer import LabTokenizer
from engine.poison_pattern import AUDIT_EVERY

TOK = LabTokenizer(MODEL_DIR)


def _core() -> EngineCore:
    cfg = LabConfig(geometry="hybrid", enable_prefix_caching=True,
                    speculative_config={"method": "ngram", "num_speculative_tokens": 3}).finalize()
    core = EngineCore(cfg, TOK)
    core.stale.residue_lab_arm()
    assert core.stale.residue_lab_restore_pool("A", "whole")["ok"]
    return core


def _point(core: EngineCore, rid: str) -> None:
    text = " ".join(f"line {i} of the river" for i in range(60))
    ids = TOK.encode(TOK.apply_chat_template([{"role": "user", "content": text}]))
    core.add_request(Request(rid, ids, 20, TOK.stop_token_ids))
    for _ in range(10_000):
        if not core.has_work():
            return
        core.step()
    raise AssertionError("engine did not finish")


def _memory(core: EngineCore) -> list[np.ndarray]:
    p = core.pool
    return [p.kv_tok.copy(), p.kv_pos.copy(), p.slot_last.copy(), p.slot_drafts.copy()]


def test_a_dirty_restore_refills_what_the_point_wrote_and_equals_the_whole_fill():
    core = _core()
    fresh = _memory(core)
    _point(core, "a")
    assert any(not np.array_equal(a, b) for a, b in zip(fresh, _memory(core)))
    core.reset_prefix_cache()
    out = core.stale.residue_lab_restore_pool("A")
    assert out["ok"] and out["means"] == "dirty" and out["why"] is None
    assert 0 < out["restored"]["blocks"] < core.pool.kv_pos.shape[0] // core.pool.block_size
    assert out["restored"]["bytes"] < core.pool.nbytes / 10       # not the whole pool
    assert all(np.array_equal(a, b) for a, b in zip(fresh, _memory(core)))
    assert core.stale.residue_lab_audit("A")["ok"]


def test_a_write_outside_the_tracked_set_is_caught_by_the_audit():
    core = _core()
    _point(core, "a")
    core.pool.kv_tok[-1] += 1                 # the last slot: no request was given it
    core.reset_prefix_cache()
    assert core.stale.residue_lab_restore_pool("A")["ok"]     # the dirty set looks fine
    audit = core.stale.residue_lab_audit("A")
    assert not audit["ok"] and audit["checksum"] == 1 and audit["repaired_by"]
    assert core.stale.residue_lab_audit("A")["ok"]


def test_the_cadence_audits_every_sixteenth_restore():
    core = _core()
    audits = []
    for i in range(AUDIT_EVERY):
        _point(core, f"r{i}")
        core.reset_prefix_cache()
        out = core.stale.residue_lab_restore_pool("A")
        assert out["ok"]
        audits.append(out["audit"] is not None)
    assert audits == [False] * (AUDIT_EVERY - 1) + [True]


def test_without_arm_the_whole_fill_runs_and_says_why():
    core = EngineCore(LabConfig(geometry="hybrid").finalize(), TOK)
    out = core.stale.residue_lab_restore_pool("A")
    assert out["means"] == "storage-fill" and "not tracked" in out["why"]
