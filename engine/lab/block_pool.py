"""Block pool: the paged KV cache's physical blocks, their reference counts, the LRU queue
of free blocks and the map from block hash to cached block.

Mirrors ``vllm/v1/core/block_pool.py`` (``BlockPool``, ``FreeKVCacheBlockQueue``):
- a freed block keeps its hash and stays findable by prefix-cache lookups until it is
  reallocated; reallocation takes the least recently freed block first (LRU) and evicts
  its hash then;
- blocks of a finished request are freed tail first, so its prefix outlives its suffix;
- ``touch`` takes a cached free block back out of the free queue when a new request hits it.

The KV data itself lives in two flat numpy arrays indexed by slot
(``block_id * block_size + offset``): ``kv_tok`` (the token id a layer wrote) and
``kv_pos`` (the position it was written for). Recurrent-state snapshots for hybrid
prefix caching (vLLM's cached mamba-group blocks) are attached to the hash of the block
that ends an aligned prefix and evicted with it.

The pool also holds the **state slots** a replayed verify graph reads (``slot_last``,
``slot_drafts``: one slot per persistent-batch row; see ``model_runner.py``). In vLLM the
memory a FULL spec-verify replay reads its recurrent state from is a hybrid's mamba state,
which sits in the KV cache tensor, named by persistent indices that only spec-decode steps
refresh. So it behaves like KV memory, and that is what ``/reset_prefix_cache`` and sleep
mode do differently:

- ``reset_prefix_cache`` forgets hashes only (``BlockPool.reset_prefix_cache`` in vLLM):
  freed blocks keep their contents and the state slots keep what the last decode step
  staged, so a reused server's next replay reads what it served before;
- ``discard`` is sleep level >= 1 (``CuMemAllocator.sleep``: the ``kv_cache`` tag is not
  backed up; ``wake_up`` maps new, empty memory): every array is back to its boot
  contents (the state slots: this server's per-process boot contents, poison.py). The block metadata (reference counts, free queue) is the scheduler's and is
  not memory sleep touches; the hashes go with the prefix-cache reset sleep does first.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from .evict_key import evict_key

__all__ = ["BlockPool"]


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool,
                 num_rows: int = 1, num_spec_tokens: int = 0, group_id: int = 0,
                 evict_group_key: bool = True) -> None:
        self.num_blocks = num_blocks
        # the attention group's id in the hash map's keys (evict_key.py): 1 in the hybrid,
        # whose recurrent group is group 0; 0 in the dense geometry
        self.group_id = group_id
        self.evict_group_key = evict_group_key
        self.block_size = block_size
        self.enable_caching = enable_caching
        n_slots = num_blocks * block_size
        self.kv_tok = np.zeros(n_slots, dtype=np.int32)
        self.kv_pos = np.full(n_slots, -1, dtype=np.int32)
        # state slots of the persistent-batch rows: the last sampled token and the drafts a
        # decode step staged (what a replayed verify graph reads)
        self.slot_last = np.zeros(num_rows, dtype=np.int32)
        self.slot_drafts = np.zeros((num_rows, max(1, num_spec_tokens)), dtype=np.int32)
        self.discards = 0   # times sleep discarded this memory
        # the state slots as the boot left them (engine/lab/poison.StaleMemory sets them)
        self.boot_slots: tuple[np.ndarray, np.ndarray] | None = None
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        # Insertion order = eviction order (front is evicted first).
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[tuple[int, int], int] = {}   # (block hash, group id) -> block id
        self.state_snapshots: dict[int, Any] = {}  # block hash -> recurrent state
        # align mode's state blocks: what each block's recurrent-state memory holds
        # (mamba_align.py); absent: never written since boot
        self.state_mem: dict[int, Any] = {}
        self.cached_by: dict[int, str] = {}        # block id -> the request that cached it
        self.evicted: list[str] = []               # owners of blocks evicted, until read

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def usage(self) -> float:
        return 1.0 - len(self.free_queue) / self.num_blocks

    def get_cached_block(self, block_hash: int) -> int | None:
        return self.cached.get((block_hash, self.group_id))

    def _evict(self, block_id: int) -> None:
        h = self.block_hash[block_id]
        if h is not None:
            self.evicted.append(self.cached_by.pop(block_id, "?"))
            key = evict_key(h, self.group_id, self.evict_group_key)
            if self.cached.get(key) == block_id:
                del self.cached[key]
                self.state_snapshots.pop(h, None)
            self.block_hash[block_id] = None

    def get_new_blocks(self, n: int) -> list[int]:
        if n > len(self.free_queue):
            raise ValueError(f"cannot get {n} free blocks from the pool")
        out = []
        for _ in range(n):
            b, _ = self.free_queue.popitem(last=False)
            self._evict(b)
            self.ref_cnt[b] = 1
            out.append(b)
        return out

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref_cnt[b] == 0:
                self.free_queue.pop(b, None)
            self.ref_cnt[b] += 1

    def free_blocks(self, ordered_blocks: list[int]) -> None:
        """Free blocks; ``ordered_blocks`` is in eviction order (first evicted first)."""
        for b in ordered_blocks:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free_queue[b] = None

    def cache_block(self, block_id: int, block_hash: int, owner: str = "") -> None:
        if not self.enable_caching or self.block_hash[block_id] is not None:
            return
        key = (block_hash, self.group_id)
        if key in self.cached:  # an identical block is already cached: keep that one
            return
        self.block_hash[block_id] = block_hash
        self.cached[key] = block_id
        self.cached_by[block_id] = owner

    def take_over(self, block_id: int, block_hash: int, owner: str = "") -> None:
        """Make ``block_id`` the cached block of ``block_hash`` in place of the block that
        holds it (same tokens, so the same KV): that one keeps its memory, loses its hash."""
        key = (block_hash, self.group_id)
        old = self.cached.get(key)
        if old is not None and old != block_id:
            self.block_hash[old] = None
            self.cached_by.pop(old, None)
        self.block_hash[block_id] = block_hash
        self.cached[key] = block_id
        self.cached_by[block_id] = owner

    def store_snapshot(self, block_hash: int, state: Any) -> None:
        if self.enable_caching and (block_hash, self.group_id) in self.cached:
            self.state_snapshots[block_hash] = state

    def reset_prefix_cache(self) -> bool:
        """Forget every hash: metadata only, the memory keeps its contents."""
        for _, b in list(self.cached.items()):
            self.block_hash[b] = None
        self.cached.clear()
        self.state_snapshots.clear()
        return True

    def discard(self) -> int:
        """Sleep level >= 1: the KV memory is released and comes back empty (its boot
        contents) on wake. Filled in place: the runner holds views of these arrays.
        Returns the bytes discarded."""
        self.kv_tok.fill(0)
        self.kv_pos.fill(-1)
        if self.boot_slots is None:
            self.slot_last.fill(0)
            self.slot_drafts.fill(0)
        else:
            self.slot_last[:], self.slot_drafts[:] = self.boot_slots
        self.state_snapshots.clear()
        self.state_mem.clear()
        self.discards += 1
        return self.nbytes

    @property
    def nbytes(self) -> int:
        return (self.kv_tok.nbytes + self.kv_pos.nbytes + self.slot_last.nbytes
                + self.slot_drafts.nbytes)
