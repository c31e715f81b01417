"""KV cache manager: prefix-cache lookups across the KV cache groups, slot allocation and
block tables.

Mirrors ``vllm/v1/core/kv_cache_manager.py`` (``get_computed_blocks``, ``allocate_slots``,
``free``), ``vllm/v1/core/kv_cache_coordinator.py`` (``HybridKVCacheCoordinator``: the
hit is the longest prefix every group can serve) and
``vllm/v1/core/single_type_kv_cache_manager.py`` (``find_longest_cache_hit`` per group).

Groups in the lab:
- full attention (always): physical blocks of ``--block-size``; chained block hashes;
  the longest run of cached blocks, aligned down to the hash unit and capped at
  ``n - 1`` tokens so the last prompt token is always recomputed;
- recurrent state (hybrid geometry): a hit is only usable where a state snapshot exists,
  and snapshots are taken at hash-unit boundaries (the page block unless
  ``--prefix-match-unit`` says otherwise);
- dflash drafter sliding window (dflash only): its block may be promoted by the page
  arithmetic (see ``config.py``). ``find_longest_cache_hit`` asserts the alignment is a
  whole number of its blocks -- the upstream assert of issue #18. The pre-fix guard only
  handled a block *smaller* than the hash unit; the ``sliding-window-guard`` patch also
  handles a *larger* one by taking a clean miss for the group.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .block_pool import BlockPool
from .request import Request


def hash_blocks(tokens: np.ndarray, block_size: int, parent: int | None,
                start_block: int) -> list[int]:
    """Chained hashes of the full blocks of ``tokens`` from block index ``start_block``."""
    n_full = len(tokens) // block_size
    out = []
    h = parent if parent is not None else 0x5EED
    blocks = tokens[start_block * block_size:n_full * block_size]
    if len(blocks):
        for row in blocks.reshape(-1, block_size):
            h = hash((h, row.tobytes()))
            out.append(h)
    return out


class SlidingWindowGroup:
    """The dflash drafter's sliding-window KV group (no blocks of its own in the lab)."""

    def __init__(self, block_size: int, guard_patch: bool) -> None:
        self.block_size = block_size
        self.guard_patch = guard_patch

    def find_longest_cache_hit(self, max_hit_tokens: int, alignment_tokens: int) -> int:
        if self.block_size < alignment_tokens and alignment_tokens % self.block_size:
            # pre-fix guard: a SW block smaller than the hash unit is matched in whole units
            alignment_tokens = math.lcm(alignment_tokens, self.block_size)
        if self.guard_patch and self.block_size > alignment_tokens:
            # sliding-window-guard: a promoted block larger than the hash unit cannot be
            # matched at unit granularity: take a clean miss for this group
            return 0
        assert alignment_tokens % self.block_size == 0, (
            f"alignment_tokens ({alignment_tokens}) must be a multiple of the sliding-window "
            f"group's block_size ({self.block_size})")
        return max_hit_tokens // alignment_tokens * alignment_tokens


class KVCacheManager:
    def __init__(self, pool: BlockPool, *, block_size: int, alignment: int, hybrid: bool,
                 enable_caching: bool, sliding_window_block: int | None,
                 sliding_window_guard: bool, metrics: Any, drop_eagle_block: bool = False,
                 cache_states: bool = True, attention_block: int | None = None) -> None:
        self.pool = pool
        self.align = None   # align mode's state blocks (mamba_align.py), set by the scheduler
        self.drop_eagle_block = drop_eagle_block
        # the hybrid's attention block as vLLM promotes it (the page block in align mode)
        self.attention_block = attention_block or block_size
        # --mamba-cache-mode none: the recurrent group caches no state, so a hybrid never hits
        self.cache_states = cache_states
        self.block_size = block_size
        self.alignment = alignment
        self.hybrid = hybrid
        self.enable_caching = enable_caching
        self.metrics = metrics
        self.sw_group = (SlidingWindowGroup(sliding_window_block, sliding_window_guard)
                         if sliding_window_block else None)

    # -- hashing ------------------------------------------------------------------------------
    def update_block_hashes(self, req: Request) -> None:
        """Hash the request's full blocks that are not hashed yet (prompt and output)."""
        n_have = len(req.block_hashes)
        if (req.num_tokens // self.block_size) <= n_have:
            return
        parent = req.block_hashes[-1] if n_have else None
        req.block_hashes.extend(hash_blocks(req.token_array(), self.block_size, parent, n_have))

    # -- lookups ------------------------------------------------------------------------------
    def get_computed_blocks(self, req: Request) -> tuple[list[int], int, Any]:
        """(cached blocks, hit tokens, recurrent state snapshot or None)."""
        if not self.enable_caching:
            return [], 0, None
        bs = self.block_size
        max_hit = req.num_prompt_tokens - 1  # the last token is always recomputed
        blocks: list[int] = []
        for h in req.block_hashes[:max_hit // bs]:
            b = self.pool.get_cached_block(h)
            if b is None:
                break
            blocks.append(b)
        hit = len(blocks) * bs
        if self.drop_eagle_block and hit:
            # vLLM's FullAttentionManager.find_longest_cache_hit with drop_eagle_block (the
            # coordinator sets it for EAGLE/MTP/DFlash groups): the drafter needs the hidden
            # states of the tokens before the generation point, so the last matched hash unit
            # (one cache block when not fine-grained) is recomputed.
            hit -= min(self.alignment, self.attention_block, hit)
        hit = hit // self.alignment * self.alignment
        hit, snapshot = self._hit_every_group_serves(req, hit)
        self.metrics.prefix_cache_queries += req.num_prompt_tokens
        self.metrics.prefix_cache_hits += hit
        return blocks[:hit // bs], hit, (snapshot.copy() if snapshot is not None else None)

    def _hit_every_group_serves(self, req: Request, hit: int) -> tuple[int, Any]:
        """Lower ``hit`` until every group can serve it, and return the recurrent-state
        snapshot taken at exactly that boundary.

        As in ``HybridKVCacheCoordinator.find_longest_cache_hit``, each group may only
        lower the hit, and the groups are asked again until a round leaves it unchanged:
        the recurrent group needs a snapshot at the boundary, the sliding-window group a
        whole number of its blocks (which may lower the hit to a multiple of
        ``lcm(unit, SW block)``). The snapshot is looked up after the last lowering, so it
        always belongs to the returned hit.
        """
        bs = self.block_size
        while True:
            snapshot = None
            if self.hybrid and hit > 0:
                snapshot = self.pool.state_snapshots.get(req.block_hashes[hit // bs - 1])
                if snapshot is not None and self.align is not None:
                    snapshot = self.align.read(snapshot)   # the published block's memory
                if snapshot is None:
                    hit -= self.alignment
                    continue
            if self.sw_group is not None:
                # asked even for a miss, as vLLM asks every group: the #18 assert fires on
                # the first request
                sw_hit = self.sw_group.find_longest_cache_hit(hit, self.alignment)
                if sw_hit < hit:
                    hit = sw_hit  # the snapshot must be looked up again at the new boundary
                    continue
            return hit, (snapshot if hit > 0 else None)

    # -- allocation ---------------------------------------------------------------------------
    def allocate_slots(self, req: Request, num_new_tokens: int, num_lookahead: int = 0,
                       new_computed_blocks: list[int] | None = None) -> bool:
        new_computed_blocks = new_computed_blocks or []
        computed = req.num_computed_tokens + len(new_computed_blocks) * self.block_size
        need_tokens = computed + num_new_tokens + num_lookahead
        need_blocks = -(-need_tokens // self.block_size)
        have = len(req.block_ids) + len(new_computed_blocks)
        n_new = max(0, need_blocks - have)
        # cached free blocks we are about to touch leave the free queue too
        touch_free = sum(1 for b in new_computed_blocks if self.pool.ref_cnt[b] == 0)
        if n_new + touch_free > self.pool.num_free_blocks:
            return False
        if new_computed_blocks:
            self.pool.touch(new_computed_blocks)
            req.block_ids.extend(new_computed_blocks)
        if n_new:
            req.block_ids.extend(self.pool.get_new_blocks(n_new))
        req.block_table = np.asarray(req.block_ids, dtype=np.int32)
        return True

    def cache_blocks(self, req: Request) -> None:
        """Register the request's full, computed blocks in the prefix cache."""
        if not self.enable_caching:
            return
        self.update_block_hashes(req)
        n_full = min(req.num_computed_tokens // self.block_size, len(req.block_hashes),
                     len(req.block_ids))
        for i in range(req.num_cached_blocks, n_full):
            self.pool.cache_block(req.block_ids[i], req.block_hashes[i], req.request_id)
        req.num_cached_blocks = max(req.num_cached_blocks, n_full)

    def store_snapshots(self, req: Request, snapshots: dict[int, Any]) -> None:
        if not (self.enable_caching and self.hybrid and self.cache_states):
            return
        for b, state in snapshots.items():
            if b <= req.num_computed_tokens and b // self.block_size <= len(req.block_hashes):
                self.pool.store_snapshot(req.block_hashes[b // self.block_size - 1], state)

    def free(self, req: Request) -> None:
        self.pool.free_blocks(list(reversed(req.block_ids)))
        req.block_ids = []
        req.block_table = np.zeros(0, dtype=np.int32)
        req.num_cached_blocks = 0

    def reset_prefix_cache(self) -> bool:
        return self.pool.reset_prefix_cache()
