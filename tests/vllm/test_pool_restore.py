"""engine.vllm.pool_fill / pool_restore on CPU tensors laid out as a hybrid's pool: each
storage filled once, the tile made once, the proof read once, and the dirty restore
(blocks the scheduler gave) with its audit catching a write outside the tracked set."""
from __future__ import annotations

from types import SimpleNamespace

from tests._vllm import require_module

torch = require_module("torch", module_level=True)   # CI has it (vLLM); a new user may not

from engine.vllm import pool_fill as F
from engine.vllm import pool_restore as R

BLOCKS = 6
SEED = 0x5EED


def _pool():
    """One storage shared by two GDN views (block-major pages with 8 bytes of padding) and
    an attention layer split K/V across the storage (FlashAttention's (2, blocks, ...))."""
    page = 4096
    raw = torch.zeros(BLOCKS * page, dtype=torch.uint8)
    bf = raw.view(torch.bfloat16)
    conv = torch.as_strided(bf, (BLOCKS, 3, 16), (page // 2, 16, 1))
    ssm = torch.as_strided(raw.view(torch.float32), (BLOCKS, 2, 8, 8), (page // 4, 64, 8, 1), 24)
    attn = bf.view(2, BLOCKS, 4, 4, 64)                       # K then V, 2 KiB a block each
    other = torch.zeros(BLOCKS, 5, 7, dtype=torch.float16)    # a storage of its own
    return raw, [conv, ssm, attn, other]


def test_views_resolve_to_distinct_storages_each_filled_once_with_one_tile():
    raw, views = _pool()
    storages = F.resolve(views, BLOCKS)
    assert len(storages) == 2 and [len(s.views) for s in storages] == [3, 1]
    assert storages[0].period == 2048 and F.restorable(storages) is None
    tiles = F.TileCache()
    out = F.fill_whole(storages, SEED, tiles)
    assert out["ok"] and out["checksum"] == out["expected"]
    assert out["bytes"] == raw.numel() + views[3].numel() * 2      # the pool once, not per view
    F.fill_whole(storages, SEED, tiles)
    assert tiles.made == 2                                          # kept, not made again
    for v in views:   # finite in every dtype, the same bytes in every block
        assert torch.isfinite(v.float()).all()
        rows = v.movedim(1 if v is views[2] else 0, 0)
        assert torch.equal(rows[0], rows[BLOCKS - 1])
    assert raw.view(BLOCKS, -1)[:, -8:].any()                       # padding written too


def test_the_proof_reads_every_byte():
    raw, views = _pool()
    storages, tiles = F.resolve(views, BLOCKS), F.TileCache()
    F.fill_whole(storages, SEED, tiles)
    assert F.prove(storages, SEED, tiles)["ok"]
    raw[-1] ^= 1                                                    # one bit of padding
    bad = F.prove(storages, SEED, tiles)
    assert not bad["ok"] and bad["bad_storages"] == [0]


def test_a_dirty_restore_rewrites_the_named_blocks_and_proves_them():
    _, views = _pool()
    storages, tiles = F.resolve(views, BLOCKS), F.TileCache()
    F.fill_whole(storages, SEED, tiles)
    conv, ssm, attn, other = views
    attn[:, 2] = 3.0
    ssm[4] = -2.0
    other[2] = 1.0
    out = F.restore_blocks(storages, [2, 4], SEED, tiles)
    assert out["ok"] and out["blocks"] == 2 and out["by"] == "views" and out["writes"] == 4
    assert out["bytes"] < sum(s.nbytes for s in storages) / 2
    assert F.prove(storages, SEED, tiles)["ok"]                     # back to the whole fill


def _hybrid_pool(m: int = 2):
    """vLLM's hybrid layout: every layer's block i inside page i of the storage; the
    attention layer's blocks first, ``m`` kernel blocks a page, K and V side by side
    (``_update_hybrid_attention_mamba_layout``), beside a GDN layer's state views."""
    page = 4096
    raw = torch.zeros(BLOCKS * page, dtype=torch.uint8)
    bf = raw.view(torch.bfloat16)
    hidden = page // 2 // 2 // m                 # elements of one kernel block's K (or V)
    attn = torch.as_strided(bf, (2, BLOCKS * m, hidden // 64, 2, 32),
                            (hidden, 2 * hidden, 64, 32, 1))
    conv = torch.as_strided(bf, (BLOCKS, 3, 16), (page // 2, 16, 1))
    ssm = torch.as_strided(raw.view(torch.float32), (BLOCKS, 2, 8, 8), (page // 4, 64, 8, 1), 24)
    return raw, [attn, conv, ssm]


def test_the_hybrid_layout_restores_whole_pages_even_with_kernel_blocks():
    raw, views = _hybrid_pool(m=2)
    storages, tiles = F.resolve(views, BLOCKS), F.TileCache()
    assert storages[0].page == 4096 and F.restorable(storages) is None
    assert views[0].movedim(1, 0)[0].data_ptr() != views[0].movedim(1, 0)[1].data_ptr()
    F.fill_whole(storages, SEED, tiles)
    views[0][:, 2 * 3] = 1.0                     # kernel block 6: pool block 3
    views[0][:, 2 * 3 + 1] = 1.0                 # kernel block 7: pool block 3
    views[2][3] = 2.0
    out = F.restore_blocks(storages, [3], SEED, tiles)
    assert out["ok"] and out["by"] == "pages" and out["writes"] == 1 and out["bytes"] == 4096
    assert F.prove(storages, SEED, tiles)["ok"]
    views[0][:, 0] = 1.0                         # pool block 0, not restored
    F.restore_blocks(storages, [3], SEED, tiles)
    assert not F.prove(storages, SEED, tiles)["ok"]


def test_a_write_outside_the_restored_blocks_fails_the_audit():
    _, views = _pool()
    storages, tiles = F.resolve(views, BLOCKS), F.TileCache()
    F.fill_whole(storages, SEED, tiles)
    views[2][:, 1] = 1.0           # block 1 written, only block 3 restored
    views[2][:, 3] = 1.0
    assert F.restore_blocks(storages, [3], SEED, tiles)["ok"]
    assert not F.prove(storages, SEED, tiles)["ok"]


def test_a_view_without_the_block_dim_makes_the_dirty_set_unusable():
    storages = F.resolve([torch.zeros(4, 4)], BLOCKS)
    assert "no single dim" in F.restorable(storages)


def test_copy_bandwidth_counts_read_and_write():
    out = F.copy_bandwidth("cpu", 1 << 20, repeats=2)
    assert out["timer"] == "perf_counter" and out["bytes_per_s"] > 0 and out["bytes"] == 1 << 20


# -- the worker: tracked blocks, the whole fill where they are unknown, the audit cadence ----
class _Worker(R.PoolRestore):
    def __init__(self, views):
        self.views = views
        self.runner = SimpleNamespace(kv_cache_config=SimpleNamespace(num_blocks=BLOCKS))
        self.ran: list = []
        builder = torch.arange(4, dtype=torch.int32)
        self._rl_builders_boot = [(builder, builder.clone())]
        self.builder = builder

    def _rl_runner(self):
        return self.runner

    def _rl_layers(self):
        return [(i, f"l{i}", "kv", [v]) for i, v in enumerate(self.views)]

    def execute_model(self, scheduler_output):
        self.ran.append(scheduler_output)
        state = next(v for v in self.views if v.shape[0] == BLOCKS)   # blocks first
        for req in scheduler_output.scheduled_new_reqs:   # the model writes its blocks
            for b in getattr(req, "block_ids", ([],))[0]:
                state[b] = 0.5
        for src, dst in getattr(scheduler_output, "kv_cache_block_copies", None) or ():
            # as vLLM's copy_kv_cache_blocks_inplace: a whole page, every storage
            for t in {id(v.untyped_storage()): v for v in self.views}.values():
                pages = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
                pages = pages.view(BLOCKS, -1)
                pages[dst] = pages[src]
        return "out"


def _step(new_blocks, cached_blocks=None, **fields):
    return SimpleNamespace(
        scheduled_new_reqs=[SimpleNamespace(block_ids=(list(new_blocks), list(new_blocks)))],
        scheduled_cached_reqs=SimpleNamespace(new_block_ids=[cached_blocks]), **fields)


def test_the_worker_restores_what_its_steps_were_given_and_audits_on_cadence():
    _, views = _hybrid_pool()
    w = _Worker(views)
    w._rl_track()
    boot = w.residue_lab_restore_pool("A", "whole")
    assert boot["ok"] and boot["means"] == "storage-fill" and boot["restored"]["blocks"] == "all"
    assert w.execute_model(_step([2], ([3],))) == "out" and len(w.ran) == 1
    w.builder.add_(7)
    out = w.residue_lab_restore_pool("A")
    assert out["ok"] and out["means"] == "dirty" and out["why"] is None
    assert out["restored"]["blocks"] == 3                    # 2, 3 and the null block
    assert torch.equal(w.builder, torch.arange(4, dtype=torch.int32))
    assert w.residue_lab_audit("A")["ok"]
    for i in range(R.AUDIT_EVERY - 1):                      # the 16th restore audits
        w.execute_model(_step([1]))
        res = w.residue_lab_restore_pool("A")
        assert (res["audit"] is not None) == (i == R.AUDIT_EVERY - 2)
    assert res["audit"]["ok"]


def test_a_write_the_tracking_missed_is_caught_and_repaired():
    _, views = _pool()
    w = _Worker(views)
    w._rl_track()
    w.residue_lab_restore_pool("A", "whole")
    views[3][5] = 9.0                                        # nobody was given block 5
    audit = w.residue_lab_audit("A")
    assert not audit["ok"] and audit["repaired_by"]["ok"]
    assert w.residue_lab_audit("A")["ok"]


def test_a_partial_tail_copy_into_a_block_no_request_names_is_restored():
    """The first H200 run's audits (0/2, every storage): with a prefix-match unit finer than
    the block, the cold request registers a partial tail and the next step copies its page
    into a fresh block that no block table names (``kv_cache_block_copies``)."""
    _, views = _hybrid_pool()
    w = _Worker(views)
    w._rl_track()
    w.residue_lab_restore_pool("A", "whole")
    w.execute_model(_step([2], kv_cache_block_copies=[(2, 5)]))   # 5: nobody's block
    out = w.residue_lab_restore_pool("A")
    assert out["ok"] and out["means"] == "dirty" and out["restored"]["blocks"] == 3
    assert w.residue_lab_audit("A")["ok"]


def test_a_field_naming_blocks_this_does_not_read_is_the_whole_fill():
    _, views = _hybrid_pool()
    w = _Worker(views)
    w._rl_track()
    w.residue_lab_restore_pool("A", "whole")
    w.execute_model(_step([2], block_moves=[(2, 4)]))
    out = w.residue_lab_restore_pool("A")
    assert out["ok"] and out["means"] == "storage-fill" and "block_moves" in out["why"]


def test_an_unknown_scheduler_output_falls_back_to_the_whole_fill_and_says_why():
    _, views = _pool()
    w = _Worker(views)
    w._rl_track()
    w.residue_lab_restore_pool("A", "whole")
    w.execute_model(SimpleNamespace(scheduled_new_reqs=[SimpleNamespace()]))
    out = w.residue_lab_restore_pool("A")
    assert out["ok"] and out["means"] == "storage-fill" and "another shape" in out["why"]
    untracked = _Worker(views)
    assert "not tracked" in untracked.residue_lab_restore_pool("A")["why"]


def test_no_step_seen_since_the_last_restore_is_the_whole_fill():
    """The wrap off the worker's path would leave an empty dirty set: never trusted."""
    _, views = _pool()
    w = _Worker(views)
    w._rl_track()
    w.residue_lab_restore_pool("A", "whole")
    out = w.residue_lab_restore_pool("A")
    assert out["means"] == "storage-fill" and "no step was seen" in out["why"]


def test_this_vllm_routes_execute_model_through_the_worker_instance():
    """The executor calls the wrapper's ``execute_model``, which looks the worker's up on
    the instance (``self.worker.execute_model``), where the attribute the arm sets wins."""
    import inspect

    from tests._vllm import require_vllm
    require_vllm()
    from vllm.v1.worker.worker_base import WorkerWrapperBase
    assert "self.worker.execute_model(" in inspect.getsource(WorkerWrapperBase.execute_model)


def test_the_block_ids_are_read_from_this_vllm_scheduler_output():
    from tests._vllm import require_vllm
    require_vllm()
    from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
    out = SchedulerOutput.make_empty()
    out.scheduled_new_reqs.append(NewRequestData(
        req_id="r", prompt_token_ids=[1], mm_features=[], sampling_params=None,
        pooling_params=None, block_ids=([4, 5], [9]), num_computed_tokens=0, lora_request=None))
    out.scheduled_cached_reqs = CachedRequestData.make_empty()
    out.scheduled_cached_reqs.new_block_ids.extend([([6], [10]), None])
    assert R.dirty_ids(out) == {4, 5, 6, 9, 10}
    if hasattr(out, "kv_cache_block_copies"):     # the partial-tail CoW of align mode
        from vllm.v1.core.kv_cache_utils import KVCacheBlockCopy
        out.kv_cache_block_copies = [KVCacheBlockCopy(src_block_id=5, dst_block_id=11)]
        assert R.dirty_ids(out) == {4, 5, 6, 9, 10, 11}
    assert R._unread_block_fields(out) == []     # every field of this release that names blocks


def test_the_worker_extension_has_no_name_vllms_worker_has():
    """vLLM refuses an extension any of whose names its worker already has
    (``worker_base.py``): the dirty set's wrap is set on the instance at arm instead."""
    from tests._vllm import require_vllm
    require_vllm()
    from vllm.v1.worker.gpu_worker import Worker

    from engine.vllm.poison import PoisonWorker
    assert [a for a in dir(PoisonWorker) if not a.startswith("__") and hasattr(Worker, a)] == []


def test_the_doubling_fill_writes_the_broadcast_fills_bytes(monkeypatch):
    """The doubling copies (a short first stretch here, so several doublings and a
    tail that is not a whole period) leave the same bytes as the tile broadcast."""
    monkeypatch.setattr(F, "SEED_BYTES", 1)
    raw, views = _hybrid_pool()
    tail = torch.zeros(3 * F.MAX_PERIOD + 40, dtype=torch.uint8)   # a storage of its own
    storages, tiles = F.resolve(views + [tail], BLOCKS), F.TileCache()
    assert storages[1].period < storages[1].nbytes < 4 * storages[1].period
    out = F.fill_whole(storages, SEED, tiles)
    assert out["ok"] and out["how"] == "doubling"
    doubled = raw.clone(), tail.clone()
    raw.zero_(), tail.zero_()
    assert F.fill_whole(storages, SEED, tiles, how="broadcast")["ok"]
    assert torch.equal(raw, doubled[0]) and torch.equal(tail, doubled[1])


def test_the_paged_audit_names_the_blocks_written_outside():
    raw, views = _hybrid_pool()
    storages, tiles = F.resolve(views, BLOCKS), F.TileCache()
    F.fill_whole(storages, SEED, tiles)
    ok = F.prove(storages, SEED, tiles)
    assert ok["ok"] and ok["by"] == "pages" and ok["bad_blocks"] == []
    raw.view(BLOCKS, -1)[4, 7] ^= 1                              # one bit of block 4
    bad = F.prove(storages, SEED, tiles)
    assert not bad["ok"] and bad["bad_blocks"] == [4] and bad["bad_storages"] == [0]
    assert F.restore_blocks(storages, [4], SEED, tiles)["ok"]
    assert F.prove(storages, SEED, tiles)["ok"]
    raw2, views2 = _hybrid_pool()                                 # a second storage
    both = F.resolve(views + views2, BLOCKS)
    F.fill_whole(both, SEED, tiles)
    raw2.view(BLOCKS, -1)[2, 0] ^= 4
    bad = F.prove(both, SEED, tiles)
    assert bad["bad_storages"] == [1] and bad["bad_blocks"] == [2] and bad["bad_pages"] == 1
