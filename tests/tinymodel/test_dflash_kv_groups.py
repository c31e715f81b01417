"""The DFlash drafter's layer count against vLLM's own KV-cache grouping (issue 18).

On one H200, vLLM 0.26.0 refused the 4-layer drafter for the committed hybrid (4 GDN +
2 full-attention layers) with "All drafting layers should belong to the same kv cache
group". Here the installed vLLM's own code decides, on CPU: the KV-cache specs are real
``vllm.v1.kv_cache_interface`` objects built from the committed config.json (GDN state
shapes and dtypes from vLLM's ``MambaStateShapeCalculator`` / ``MambaStateDtypeCalculator``,
pages padded equal as vLLM pads them), grouped by ``get_kv_cache_groups`` /
``_get_kv_cache_groups_uniform_page_size`` (``vllm/v1/core/kv_cache_utils.py``), and judged by
``SpecDecodeBaseProposer.validate_same_kv_cache_group``, the check that raised on the GPU.

Stand-ins, and why: ``get_kv_cache_groups`` takes a ``VllmConfig`` but reads only its
``scheduler_config`` on this path; a ``VllmConfig`` cannot be built on a box without an
accelerator ("Failed to infer device type"), so it gets a namespace holding a real
``SchedulerConfig``. ``validate_same_kv_cache_group`` reads only
``self._draft_attn_layer_names``, so it is called unbound on a namespace holding that set.

0.26.0 vs 0.27.1 (read in both wheels' source): the group-size rule (smallest per-spec
layer count, unless the largest is below 1.5 x it) and the round-robin split are the same.
0.27.1 adds a step that merges per-spec buckets whose specs ``merge()`` accepts (e.g. full
attention differing only in sliding window); FullAttentionSpec.merge refuses a MambaSpec
and MambaSpec.merge needs equal specs, so for this target the buckets, hence the groups,
are the same in both. ``Attention.get_kv_cache_spec`` builds the same FullAttentionSpec for
the target's and the drafter's layers in both, and the hybrid block-size promotion
(``Platform._align_hybrid_block_size``) differs only for MLA models. This file was also run
once by hand against the 0.26.0 wheel's Python source put first on PYTHONPATH (CPU, same
venv): all tests passed, with the same groups (1-3 drafter layers one group, 4-6 split).
"""
from __future__ import annotations

import argparse
import json
import math
import types
from pathlib import Path

import pytest

from tests._vllm import require_module, require_vllm

from engine.tinymodel import dflash_kv_groups as kvg
from engine.tinymodel.dflash_train import add_parser

ROOT = Path(__file__).resolve().parents[2]
HYBRID = ROOT / "engine" / "tinymodel" / "weights" / "hybrid"
TEXT = json.loads((HYBRID / "config.json").read_text())["text_config"]
LAYER_TYPES = TEXT["layer_types"]
K = 7  # the dflash preset's num_speculative_tokens: the GDN conv state holds k more steps
REQUESTED_BLOCK = 128  # the lab's --block-size (the H200 log's non-default args)


# ----------------------------------------------------------------------------- vLLM side
@pytest.fixture(scope="module")
def vllm_kv():
    torch = require_module("torch")
    require_vllm(module_level=False)
    from vllm.config import SchedulerConfig
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, MambaSpec
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    return types.SimpleNamespace(
        torch=torch, SchedulerConfig=SchedulerConfig, kv_cache_utils=kv_cache_utils,
        MambaStateDtypeCalculator=MambaStateDtypeCalculator,
        MambaStateShapeCalculator=MambaStateShapeCalculator,
        MambaAttentionBackendEnum=MambaAttentionBackendEnum,
        FullAttentionSpec=FullAttentionSpec, KVCacheConfig=KVCacheConfig, MambaSpec=MambaSpec,
        SpecDecodeBaseProposer=SpecDecodeBaseProposer)


def _pages(v) -> dict:
    """Block size and page sizes as vLLM sets them for this hybrid in align mode
    (``Platform._align_hybrid_block_size``: the requested block, 128, is above the
    backend's smallest kernel block, so the block is 128 x ceil(mamba page / 128-token
    attention page); the GDN page is then padded up to the attention page)."""
    shapes = v.MambaStateShapeCalculator.gated_delta_net_state_shape(
        1, TEXT["linear_num_key_heads"], TEXT["linear_num_value_heads"],
        TEXT["linear_key_head_dim"], TEXT["linear_value_head_dim"],
        TEXT["linear_conv_kernel_dim"], K)
    dtypes = v.MambaStateDtypeCalculator.gated_delta_net_state_dtype(
        v.torch.bfloat16, "auto", "auto")
    gdn_page = v.MambaSpec(shapes=shapes, dtypes=dtypes, block_size=-1).page_size_bytes
    per_token = v.FullAttentionSpec(block_size=1, num_kv_heads=TEXT["num_key_value_heads"],
                                    head_size=TEXT["head_dim"],
                                    dtype=v.torch.bfloat16).page_size_bytes
    block = REQUESTED_BLOCK * math.ceil(gdn_page / (REQUESTED_BLOCK * per_token))
    return {"shapes": shapes, "dtypes": dtypes, "gdn_page": gdn_page, "block": block,
            "attn_page": block * per_token}


def _spec(v, layer_types, n_draft: int) -> tuple[dict, list[str]]:
    """kv_cache_spec in the runner's order (target layers, then the drafter's, named as
    Qwen3_5ForConditionalGeneration and DFlashQwen3ForCausalLM name them) and the drafter's
    layer names. The drafter's attention comes from our own drafter_config."""
    from engine.tinymodel.dflash_model import drafter_config
    p = _pages(v)
    bf16 = v.torch.bfloat16
    target_attn = v.FullAttentionSpec(block_size=p["block"], dtype=bf16,
                                      num_kv_heads=TEXT["num_key_value_heads"],
                                      head_size=TEXT["head_dim"])
    gdn = v.MambaSpec(shapes=p["shapes"], dtypes=p["dtypes"], block_size=p["block"],
                      page_size_padded=p["attn_page"],
                      mamba_type=v.MambaAttentionBackendEnum.GDN_ATTN,
                      mamba_cache_mode="align", num_speculative_blocks=K)
    dcfg = drafter_config(num_layers=n_draft, block_size=K + 1)
    draft_attn = v.FullAttentionSpec(block_size=p["block"], dtype=bf16,
                                     num_kv_heads=dcfg["num_key_value_heads"],
                                     head_size=dcfg["head_dim"])
    spec = {}
    for i, kind in enumerate(layer_types):
        full = kind == kvg.FULL_ATTENTION
        name = f"language_model.model.layers.{i}." + ("self_attn.attn" if full else "linear_attn")
        spec[name] = target_attn if full else gdn
    drafter = [f"model.layers.{len(layer_types) + j}.self_attn.attn"
               for j in range(dcfg["num_hidden_layers"])]
    spec.update({name: draft_attn for name in drafter})
    return spec, drafter


def _public_groups(v, spec):
    """vLLM's get_kv_cache_groups with the hybrid KV-cache manager on (as served)."""
    cfg = types.SimpleNamespace(scheduler_config=v.SchedulerConfig.default_factory(
        disable_hybrid_kv_cache_manager=False))
    return v.kv_cache_utils.get_kv_cache_groups(cfg, spec)


def _drafter_group_ids(groups, drafter) -> set[int]:
    where = {name: gid for gid, g in enumerate(groups) for name in g.layer_names}
    return {where[name] for name in drafter}


def _vllm_accepts(v, groups, drafter) -> bool:
    kv_config = v.KVCacheConfig(num_blocks=1, kv_cache_tensors=[], kv_cache_groups=groups)
    proposer = types.SimpleNamespace(_draft_attn_layer_names=set(drafter))
    try:
        v.SpecDecodeBaseProposer.validate_same_kv_cache_group(proposer, kv_config)
    except AssertionError as e:
        assert "All drafting layers should belong to the same kv cache group" in str(e)
        return False
    return True


def test_pages_are_the_ones_the_h200_log_shows(vllm_kv):
    # issue 18's boot log: "Setting attention block size to 256 tokens" and "Padding mamba
    # page size by 62.03%" for block 128, k = 7
    p = _pages(vllm_kv)
    assert p["block"] == 256
    assert round(100 * (p["attn_page"] - p["gdn_page"]) / p["gdn_page"], 2) == 62.03
    spec, _ = _spec(vllm_kv, LAYER_TYPES, 3)
    assert {s.page_size_bytes for s in spec.values()} == {p["attn_page"]}


@pytest.mark.parametrize("n_draft", [1, 2, 3, 4, 5, 6])
def test_vllm_keeps_1_to_3_drafter_layers_in_one_group_and_splits_4(vllm_kv, n_draft):
    spec, drafter = _spec(vllm_kv, LAYER_TYPES, n_draft)
    groups = _public_groups(vllm_kv, spec)
    one_group = n_draft <= 3
    assert (len(_drafter_group_ids(groups, drafter)) == 1) is one_group
    assert _vllm_accepts(vllm_kv, groups, drafter) is one_group
    if n_draft == 3:  # group size 5: GDN padded 4 -> 5, attention one group of 2 + 3
        assert sorted(len(g.layer_names) for g in groups) == [4, 5]
    if n_draft == 4:  # the regression: group size 4, attention 2 + 4 cut into two groups
        assert sorted(len(g.layer_names) for g in groups) == [3, 3, 4]


def test_tooling_defaults_give_a_drafter_vllm_accepts(vllm_kv):
    from engine.tinymodel.dflash_model import drafter_config
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(), Path("tok"), HYBRID)
    cli_layers = parser.parse_args(["train-dflash", "--out", "x"]).layers
    assert cli_layers == drafter_config()["num_hidden_layers"] == kvg.DEFAULT_NUM_LAYERS == 3
    spec, drafter = _spec(vllm_kv, LAYER_TYPES, cli_layers)
    assert _vllm_accepts(vllm_kv, _public_groups(vllm_kv, spec), drafter)


# other GDN : attention mixes, so the mirror is checked beyond the one target it serves
TARGETS = {
    "committed": LAYER_TYPES,
    "gdn3-attn1-x2": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
    + ["full_attention"],
    "gdn1-attn1-x3": ["linear_attention", "full_attention"] * 3,
    "gdn3-attn1-x4": (["linear_attention"] * 3 + ["full_attention"]) * 4,
}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_mirror_matches_vllms_grouping_function(vllm_kv, target):
    layer_types = TARGETS[target]
    seen = []
    for n_draft in range(1, 21):
        spec, drafter = _spec(vllm_kv, layer_types, n_draft)
        groups = vllm_kv.kv_cache_utils._get_kv_cache_groups_uniform_page_size(spec)
        vllm_count = len(_drafter_group_ids(groups, drafter))
        assert kvg.draft_kv_group_count(layer_types, n_draft) == vllm_count, n_draft
        seen.append(vllm_count == 1)
        if n_draft == 4 and target == "committed":
            assert vllm_count == 2
    assert kvg.safe_draft_layer_counts(layer_types, 20) == [
        n for n, ok in enumerate(seen, start=1) if ok]
    assert any(seen) and not all(seen)  # each mix has counts on both sides


# ----------------------------------------------------------------------------- train-dflash
def test_mirror_on_the_committed_target_as_read():
    assert kvg.safe_draft_layer_counts(LAYER_TYPES) == [1, 2, 3]
    assert kvg.draft_layers_problem(LAYER_TYPES, 3) is None
    msg = kvg.draft_layers_problem(LAYER_TYPES, 4)
    assert "split over 2 vLLM KV-cache groups" in msg and "4 linear_attention" in msg


# should the refusal regress, the run below trains one tiny step instead of minutes
QUICK = ["--max-steps", "1", "--time-cap", "5", "--workers", "1", "--stage", "0",
         "--tokens-per-batch", "256", "--eval-n", "1", "--no-harness-eval"]


def test_train_dflash_refuses_a_drafter_vllm_would_split(capsys, tmp_path):
    require_module("torch")
    from engine.tinymodel.__main__ import main
    assert main(["train-dflash", "--out", str(tmp_path / "o"), "--layers", "4", *QUICK]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: a 4-layer drafter would be split")
    assert "KV-cache groups" in err[0] and "1, 2, 3" in err[0]
    # --init: the saved drafter's own layer count is the one checked
    init = tmp_path / "init"
    init.mkdir()
    (init / "config.json").write_text(json.dumps({"num_hidden_layers": 5}))
    assert main(["train-dflash", "--out", str(tmp_path / "o2"), "--init", str(init), *QUICK]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: a 5-layer drafter would be split")
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()
