"""benchmarks/shapes: the weightless config folders of the cost curve (issue 35) are what
their generator makes, vLLM's own config classes accept them, and the parameter and KV-pool
arithmetic the cost curve and docs/scale.md quote equals transformers' and vLLM's own."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests._vllm import require_module, require_vllm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.shapes import make_shapes as ms  # noqa: E402

TINY = ROOT / "engine" / "tinymodel" / "weights" / "hybrid"


def test_the_committed_folders_are_what_the_generator_makes():
    assert ms.differences() == []


def test_a_changed_folder_is_named(tmp_path):
    ms.write(tmp_path)
    (tmp_path / "qwen35-9b-dummy" / "model.safetensors").write_bytes(b"x")
    (tmp_path / "qwen35-2b-dummy" / "vocab.json").write_text("{}")
    assert ms.differences(tmp_path) == ["qwen35-2b-dummy/vocab.json: differs",
                                        "qwen35-9b-dummy/model.safetensors: extra"]


def test_the_folders_hold_no_weights_and_the_tiny_hybrids_tokenizer():
    for name in ms.SHAPES:
        d = ms.HERE / name
        assert not [p for p in d.iterdir() if p.suffix in (".safetensors", ".bin", ".pt")]
        for f in ms.COPIED:
            assert (d / f).read_bytes() == (TINY / f).read_bytes(), f"{name}/{f}"


@pytest.mark.parametrize("name, layers, gdn_v_heads, tied", [
    ("qwen35-2b-dummy", 24, 16, True), ("qwen35-9b-dummy", 32, 32, False),
    ("qwen35-27b-dummy", 64, 48, False)])
def test_vllms_config_classes_accept_each_shape(name, layers, gdn_v_heads, tied):
    require_vllm()
    from vllm.model_executor.models.config import Qwen3_5ForConditionalGenerationConfig
    from vllm.transformers_utils.config import get_config

    cfg = get_config(str(ms.HERE / name), trust_remote_code=False)
    tc = cfg.get_text_config()
    assert (type(cfg).__name__, type(tc).__name__) == ("Qwen3_5Config", "Qwen3_5TextConfig")
    assert cfg.architectures == ["Qwen3_5ForConditionalGeneration"]
    assert (tc.num_hidden_layers, tc.linear_num_value_heads, tc.tie_word_embeddings) == \
        (layers, gdn_v_heads, tied)
    assert tc.layer_types.count("full_attention") == layers // 4
    assert tc.vocab_size == 4096 and tc.eos_token_id == 893
    assert cfg.vision_config.out_hidden_size == tc.hidden_size
    # what vLLM does with the recurrent-state dtype the published configs carry
    cache = SimpleNamespace(mamba_ssm_cache_dtype="auto")
    Qwen3_5ForConditionalGenerationConfig.verify_and_update_config(
        SimpleNamespace(cache_config=cache, model_config=SimpleNamespace(hf_text_config=tc)))
    assert cache.mamba_ssm_cache_dtype == "float32"


@pytest.mark.parametrize("name", list(ms.SHAPES))
def test_the_parameter_count_is_transformers_own(name):
    torch = require_module("torch")
    transformers = require_module("transformers")
    tc = {k: v for k, v in ms.text_config(name).items() if k not in ("model_type", "dtype")}
    with torch.device("meta"):
        model = transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(**tc))
    assert sum(p.numel() for p in model.parameters()) == ms.count_params(ms.text_config(name))["total"]


def test_the_real_vocabulary_gives_the_published_sizes():
    """9B: 8.95 B (its GGUF metadata); 27B: 26.90 B of text, which with the vision tower and
    the MTP layer is the 27.78 B of the 55.56 GB bf16 checkpoint."""
    real = {n: ms.count_params(ms.text_config(n), ms.REAL_VOCAB)["total"] for n in ms.SHAPES}
    assert round(real["qwen35-9b-dummy"] / 1e9, 2) == 8.95
    assert round(real["qwen35-27b-dummy"] / 1e9, 2) == 26.90
    assert 1.8e9 < real["qwen35-2b-dummy"] < 2.0e9
    built = ms.count_params(ms.text_config("qwen35-27b-dummy"))
    assert real["qwen35-27b-dummy"] - built["total"] == 2 * (ms.REAL_VOCAB - 4096) * 5120


@pytest.mark.parametrize("name", [*ms.SHAPES, "tiny"])
def test_the_kv_pool_arithmetic_is_vllms(name):
    require_vllm()
    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import (MambaStateDtypeCalculator,
                                                              MambaStateShapeCalculator)
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    tc = (json.loads((TINY / "config.json").read_text())["text_config"] if name == "tiny"
          else ms.text_config(name))
    shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
        1, tc["linear_num_key_heads"], tc["linear_num_value_heads"], tc["linear_key_head_dim"],
        tc["linear_value_head_dim"], tc["linear_conv_kernel_dim"], 3)
    dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(
        torch.bfloat16, "auto", tc.get("mamba_ssm_dtype", "auto"))
    geo = ms.kv_geometry(tc)
    assert MambaSpec(shapes=shapes, dtypes=dtypes, block_size=-1).page_size_bytes == \
        geo["mamba_page_bytes"]
    attn = FullAttentionSpec(block_size=geo["block_size"], num_kv_heads=tc["num_key_value_heads"],
                             head_size=tc["head_dim"], dtype=torch.bfloat16)
    assert attn.page_size_bytes == geo["page_bytes"] >= geo["mamba_page_bytes"]
    assert geo["block_size"] % 128 == 0
    assert geo["page_bytes"] - 128 * geo["attn_bytes_per_token_layer"] < geo["mamba_page_bytes"]
    if name == "tiny":   # what the committed H200 logs of the tiny hybrid say
        assert geo["block_size"] == 256
        assert round(100 * (geo["page_bytes"] - geo["mamba_page_bytes"]) / geo["mamba_page_bytes"],
                     2) == 75.34
