"""Which DFlash drafter layer counts vLLM can serve for a hybrid target.

vLLM asserts at KV-cache set-up that "All drafting layers should belong to the same kv
cache group" (``SpecDecodeBaseProposer.validate_same_kv_cache_group``,
``vllm/v1/spec_decode/llm_base_proposer.py``). The groups come from
``_get_kv_cache_groups_uniform_page_size`` (``vllm/v1/core/kv_cache_utils.py``), the path a
GDN + attention hybrid takes once its page sizes are unified. This module mirrors that rule
for layer counts only (tests/tinymodel/test_dflash_kv_groups.py checks the mirror against
vLLM's own function, so it cannot drift silently):

* layers are bucketed by KV-cache spec; a drafter shaped like the target's attention
  (``drafter_config`` copies the target's KV heads and head size) shares the target's
  full-attention bucket, the GDN layers form another;
* group size = the smallest bucket, unless the largest is below 1.5 x the smallest, then
  the largest (vLLM: ``max_num_layers < min_num_layers * 1.5``);
* each bucket is cut into ``ceil(len / group size)`` groups dealt round-robin
  (``layers[i::num_groups]``); the drafter's layers come after the target's in the spec
  dict and are consecutive, so they land in ``min(n, num_groups)`` groups.

The committed hybrid (4 GDN + 2 attention layers): 1, 2 or 3 drafter layers give one
attention group; 4 gives 6 = 1.5 x 4, so two groups and the refusal seen on the H200.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

__all__ = ["DEFAULT_NUM_LAYERS", "FULL_ATTENTION", "draft_kv_group_count",
           "draft_layers_problem", "safe_draft_layer_counts", "target_layer_types"]

#: Drafter layers by default: the most vLLM keeps in one KV-cache group next to the
#: committed hybrid (4 would be split, the H200 refusal of issue 18).
DEFAULT_NUM_LAYERS = 3
#: The ``layer_types`` entry whose layers the drafter's attention shares a spec with.
FULL_ATTENTION = "full_attention"


def kv_group_size(bucket_sizes: Sequence[int]) -> int:
    """Layers per KV-cache group for these per-spec bucket sizes (vLLM's heuristic)."""
    smallest, largest = min(bucket_sizes), max(bucket_sizes)
    # vLLM compares max < min * 1.5 in floats; 2 * max < 3 * min is the same for integers
    return largest if 2 * largest < 3 * smallest else smallest


def draft_kv_group_count(layer_types: Sequence[str], num_draft_layers: int) -> int:
    """Number of KV-cache groups vLLM spreads ``num_draft_layers`` drafter layers over,
    for a target with these ``text_config.layer_types`` (one bucket per type)."""
    if num_draft_layers < 1:
        raise ValueError("a drafter has at least one layer")
    buckets = Counter(layer_types)
    attention = buckets.pop(FULL_ATTENTION, 0) + num_draft_layers
    size = kv_group_size([attention, *buckets.values()])
    num_groups = -(-attention // size)
    return min(num_draft_layers, num_groups)


def safe_draft_layer_counts(layer_types: Sequence[str], upto: int = 16) -> list[int]:
    """Drafter layer counts in 1..upto that vLLM keeps in one KV-cache group."""
    return [n for n in range(1, upto + 1) if draft_kv_group_count(layer_types, n) == 1]


def target_layer_types(target_dir: str | Path) -> list[str] | None:
    """``text_config.layer_types`` of a served checkpoint (None when it has none)."""
    cfg = json.loads((Path(target_dir) / "config.json").read_text())
    types = cfg.get("text_config", cfg).get("layer_types")
    return list(types) if types else None


def draft_layers_problem(layer_types: Sequence[str], num_draft_layers: int) -> str | None:
    """One-line reason vLLM would refuse a drafter of this many layers, else None."""
    groups = draft_kv_group_count(layer_types, num_draft_layers)
    if groups == 1:
        return None
    counts = ", ".join(f"{v} {k}" for k, v in sorted(Counter(layer_types).items()))
    safe = safe_draft_layer_counts(layer_types)
    hint = f"; counts kept in one group: {', '.join(map(str, safe))}" if safe else ""
    return (f"a {num_draft_layers}-layer drafter would be split over {groups} vLLM KV-cache "
            f"groups for this target ({counts} layers; vLLM's "
            f"_get_kv_cache_groups_uniform_page_size), and vLLM refuses that ('All drafting "
            f"layers should belong to the same kv cache group'){hint}")
