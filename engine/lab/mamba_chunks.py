"""Mode ``all``'s state blocks under chunked prefill: where the recurrent kernel writes a
prefill chunk's states, and which state a block is cached with once it is full
(vllm-project/vllm PR #34587).

Mirrors, for ``--mamba-cache-mode all`` (a state snapshot cached at every hash unit):
- ``vllm/v1/attention/backends/mamba_attn.py`` ``_compute_prefix_caching_block_indices``:
  a prefill chunk's kernel writes the state at the end of its j-th kernel chunk into the
  request's block ``block_idx_first_scheduled_token + j`` (the block holding the chunk's
  first token: ``num_computed // block``) and the state at the chunk's end into
  ``block_idx_last_scheduled_token`` (the block holding its last token);
- ``_compute_chunk_metadata`` (``cu_chunk_seqlen``), which cuts a chunk into kernel chunks
  of one block each. Since the fix it opens with a *partial* kernel chunk up to the next
  block boundary when the chunk starts inside a block (``num_computed % chunk_size``), so
  every kernel chunk ends on the block grid and block i gets the state at (i + 1) x block.
  Before it (PR #34587's report, the Mamba1 ``selective_scan_fwd`` path), kernel chunks
  were counted from the chunk's first token: a chunk that starts inside a block writes
  the state at ``start + block`` into the block ``start`` lies in (past its end), and the
  block whose end it crosses keeps what the previous chunk's end wrote there (short of its
  end) or, when never written, the zero state;
- ``vllm/v1/core/single_type_kv_cache_manager.py`` ``MambaManager.cache_blocks`` ->
  ``cache_full_blocks``: every block the request's computed tokens fill is cached under its
  hash, whatever its state memory holds.

A chunk starts inside a block when a step's token budget is shared (two cold prefills in
one step: the second row gets ``budget - first``) or is not a multiple of the hash unit.
The request itself runs on (its running state is exact); a later request that hits the
prefix resumes from the block's state, which missed (or re-read) some of the user's turn,
and the copy model's instruction reader, whose query is the turn as the state counted it
(``State.user_len``), finds no instruction there: the answer is empty.

``--patches mamba-chunk-grid`` opens each chunk with the partial kernel chunk, as vLLM
0.27.1 does. A chunk that starts on the grid writes the same states either way.
"""
from __future__ import annotations

from typing import Any

from .block_pool import BlockPool
from .model import State

__all__ = ["PATCH", "ChunkStateBlocks", "kernel_chunk_ends"]

PATCH = "mamba-chunk-grid"


def kernel_chunk_ends(start: int, end: int, block: int, on_grid: bool) -> list[int]:
    """Where the kernel chunks of the prefill chunk [start, end) end (the last is ``end``):
    one block each, counted from the block grid (``on_grid``) or from ``start``."""
    first = (start // block + 1) * block if on_grid else start + block
    return list(range(first, end, block)) + [end]


class ChunkStateBlocks:
    """Each running request's state blocks (block index -> the state the kernel wrote
    there) and their publication when the request's computed tokens fill them."""

    def __init__(self, pool: BlockPool, block_size: int, unit: int, on_grid: bool) -> None:
        self.pool = pool
        self.bs = block_size    # the KV block, whose hash keys a cached state
        self.unit = unit        # the state block: the hash unit
        self.on_grid = on_grid
        self.written: dict[str, dict[int, Any]] = {}

    def boundaries(self, start: int, n: int) -> list[int]:
        """The positions whose states the kernel writes for a prefill chunk (the runner
        snapshots its running state there)."""
        return kernel_chunk_ends(start, start + n, self.unit, self.on_grid)

    def computed(self, req, start: int, n: int, snapshots: dict[int, Any]) -> None:
        """The chunk [start, start + n) ran: write its states into their blocks, then cache
        the blocks it filled with whatever they hold."""
        u, end = self.unit, start + n
        ends = self.boundaries(start, n)
        mine = self.written.setdefault(req.request_id, {})
        for j, q in enumerate(ends):
            # block_idx_first_scheduled + j, the last kernel chunk block_idx_last_scheduled
            block = start // u + j if q < end else -(-end // u) - 1
            if q in snapshots:
                mine[block] = snapshots[q]
        for i in range(start // u, end // u):   # filled by this chunk: cache_full_blocks
            k = (i + 1) * u // self.bs - 1       # the KV block whose hash keys the state
            if k >= len(req.block_hashes) or k >= len(req.block_ids):
                continue
            h = req.block_hashes[k]
            if self.pool.get_cached_block(h) == req.block_ids[k]:   # its own cached block
                state = mine.get(i)
                self.pool.store_snapshot(h, state.copy() if state is not None else State())

    def forget(self, req_id: str) -> None:
        """The request left the batch (finished, aborted, preempted): its blocks are freed."""
        self.written.pop(req_id, None)
