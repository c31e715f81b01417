"""Which hash-map entry an evicted block takes with it: the stale-hit-after-eviction
mechanism (local-inference-lab/vllm #480 "phantom" prefix hits after full eviction under
churn; vllm-project/vllm #50702, a hybrid where eviction is active).

Mirrors ``vllm/v1/core/block_pool.py``: ``BlockPool._maybe_evict_cached_block`` pops the
block's entry from ``cached_block_hash_to_block`` (``BlockHashToBlockMap.pop``), whose key is
a ``BlockHashWithGroupId`` (``v1/core/kv_cache_utils.py``): the same tokens are cached once
per KV cache group, so the key carries the group. A hybrid's attention group is not group
0 (the recurrent group is). An eviction that rebuilds the key from the bare block hash and
the default group 0, the single-group layout the path was written for, misses the
attention group's entry: the block is reallocated and overwritten, its own hash is reset,
and the map still sends that hash to it. A later request with the same prefix "hits" the
block, counts it as cached and reads another request's KV there.

``--patches evict-group-key`` keys the eviction with the block's own group, as vLLM stores
the whole ``BlockHashWithGroupId`` on the block. The dense geometry has one group (0), so
the unpatched key is right there; only the hybrid shows the phantom hit.
"""
from __future__ import annotations

__all__ = ["PATCH", "evict_key"]

PATCH = "evict-group-key"
DEFAULT_GROUP = 0


def evict_key(block_hash: int, group_id: int, patched: bool) -> tuple[int, int]:
    """The map key an eviction pops: the block's own group with the patch, else the
    default group the key is rebuilt with."""
    return (block_hash, group_id if patched else DEFAULT_GROUP)
