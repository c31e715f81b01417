"""Align mode's state blocks: a chunk's recurrent state is published into the prefix cache
when the chunk is SCHEDULED and copied into its block one step later (vllm-project/vllm
PR #56525).

Mirrors, for ``--mamba-cache-mode align``:
- ``vllm/v1/core/kv_cache_manager.py`` ``KVCacheManager.allocate_slots``: the blocks a
  scheduled chunk will fill are cached (``coordinator.cache_blocks(request,
  num_computed + num_new)``) at allocation, before the step runs; for the mamba group that
  publishes the hash of the block at the chunk's cacheable end;
- ``vllm/v1/worker/mamba_utils.py`` ``preprocess_mamba``: "Copy the mamba state of previous
  step to the last block": the state a chunk ends with lands in that block at the start of
  the request's NEXT step.

A request aborted (or preempted) between the two never has that next step: its block stays
published with whatever its state memory held before (``BlockPool.state_mem``: boot
contents, a zero state, or a state an earlier request left in the same physical block).
A retry of the same prefix hits that block and resumes from it; the lab's zero state knows
no user turn, so the answer is empty. The KV is fine: the attention blocks were written.

``--patches align-publish-after-copy`` publishes the hash when the copy is made, so an abort
leaves nothing published. What a hit reads is always the block's memory, patched or not.
"""
from __future__ import annotations

from typing import Any

from .block_pool import BlockPool
from .model import State

__all__ = ["PATCH", "AlignStateBlocks"]

PATCH = "align-publish-after-copy"


class AlignStateBlocks:
    def __init__(self, pool: BlockPool, block_size: int, publish_after_copy: bool) -> None:
        self.pool = pool
        self.bs = block_size
        self.publish_after_copy = publish_after_copy
        # request id -> [(block id, hash, state)] copies due at its next step
        self.pending: dict[str, list[tuple[int, int, Any]]] = {}
        self.due: dict[str, list[tuple[int, int]]] = {}   # scheduled, not yet computed

    def _block_of(self, req, end: int) -> tuple[int, int] | None:
        i = end // self.bs - 1
        if i < 0 or i >= len(req.block_hashes) or i >= len(req.block_ids):
            return None
        return req.block_ids[i], req.block_hashes[i]

    def schedule(self, req, end: int, is_boundary: bool) -> None:
        """A chunk of ``req`` ending at ``end`` was scheduled (allocate_slots)."""
        if not is_boundary or (blk := self._block_of(req, end)) is None:
            return
        self.due.setdefault(req.request_id, []).append(blk)
        if not self.publish_after_copy:
            self.pool.state_snapshots[blk[1]] = blk[0]   # published: the block, not a state

    def computed(self, req, snapshots: dict[int, Any]) -> None:
        """The step ran: the states at the chunk's boundaries wait in the running slot."""
        due = self.due.pop(req.request_id, [])
        for b, state in snapshots.items():
            blk = self._block_of(req, b)
            if blk is not None and blk in due:
                self.pending.setdefault(req.request_id, []).append((*blk, state))

    def copy_pending(self, req_ids) -> None:
        """preprocess_mamba at the start of a step: copy each scheduled request's states."""
        for rid in req_ids:
            for block, h, state in self.pending.pop(rid, []):
                self.pool.state_mem[block] = state.copy()
                if self.publish_after_copy:
                    self._publish(rid, block, h)

    def _publish(self, rid: str, block: int, h: int) -> None:
        """The patch: the hash names the block its state was just copied into.

        The hash may already be cached by ANOTHER block with the same tokens and no state:
        an aborted request's block, freed unwritten (the abort-retry history; a retry that
        could not resume there recomputes the same block). vLLM keeps both blocks under the
        hash and its mamba group only ever cached the written one; the lab's map holds one
        block per hash for both groups, so the written block takes the hash over. Keeping
        the unwritten one would leave the state unpublished: every later hit on that prefix
        misses the state the retry wrote.
        """
        cached = self.pool.get_cached_block(h)
        if cached is None:      # not cached (prefix cache reset since): nothing to publish
            return
        if cached != block and h not in self.pool.state_snapshots:
            self.pool.take_over(block, h, rid)
        if self.pool.get_cached_block(h) == block:
            self.pool.state_snapshots[h] = block

    def forget(self, req_id: str) -> None:
        """The request left the batch (finished, aborted, preempted): no next step."""
        self.pending.pop(req_id, None)
        self.due.pop(req_id, None)

    def read(self, published: Any) -> Any:
        """What a hit resumes from: the published block's state memory."""
        state = self.pool.state_mem.get(published)
        return state if state is not None else State()   # never written since boot: zeros
