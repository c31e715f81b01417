"""Model geometry (pure data; no torch) and the checkpoint layouts vLLM 0.26.0 serves.

hybrid: Qwen3.5-style text model, layers [GDN, GDN, full attention] x 2, hidden 256,
        trained as transformers' ``Qwen3_5ForCausalLM``; saved for serving as
        ``Qwen3_5ForConditionalGeneration`` (model_type ``qwen3_5``, ``text_config`` +
        a tiny ``vision_config``, weights ``model.*`` -> ``model.language_model.*``),
        served with ``--language-model-only`` (vLLM 0.26.0 has no text-only
        ``Qwen3_5ForCausalLM`` in its registry).
dense:  Qwen3-style ``Qwen3ForCausalLM``, 4 full-attention layers, hidden 256.
"""
from __future__ import annotations

VOCAB = 4096  # embedding rows; the tokenizer uses the first ~900 (the corpus is small)
VARIANTS = ("hybrid", "dense")

# What both variants share: width, attention heads, norms, initialisation.
_COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=768,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    hidden_act="silu",
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    attention_bias=False,
    attention_dropout=0.0,
    tie_word_embeddings=False,
    initializer_range=0.02,
    use_cache=True,
)

# Attention heads: head_dim 64, partial rotary 0.25 -> 16 rotary dims -> 8 frequencies,
# so the (interleaved) mrope sections must sum to 8 (vLLM asserts it).
HYBRID_TEXT = dict(
    _COMMON,
    model_type="qwen3_5_text",
    num_hidden_layers=6,
    layer_types=["linear_attention", "linear_attention", "full_attention"] * 2,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_num_key_heads=2,
    linear_num_value_heads=2,
    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25,
                         mrope_section=[3, 3, 2], mrope_interleaved=True),
)

# A tiny vision tower description: never built (served with --language-model-only), but
# the qwen3_5 config class and vLLM's processor registry expect one.
TINY_VISION = dict(
    model_type="qwen3_5_vision",
    depth=1, hidden_size=64, intermediate_size=128, num_heads=2, in_channels=3,
    patch_size=16, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=256,
    num_position_embeddings=64, hidden_act="gelu_pytorch_tanh", initializer_range=0.02,
)

DENSE = dict(
    _COMMON,
    model_type="qwen3",
    architectures=["Qwen3ForCausalLM"],
    num_hidden_layers=4,
    rope_parameters=dict(rope_type="default", rope_theta=10000.0),
    use_sliding_window=False,
    sliding_window=None,
    max_window_layers=4,
)


#: Length cap written into the served config.json / tokenizer_config.json (>= CTX=huge).
SERVED_MAX_LEN = 262144


def serving_config(variant: str, text_config: dict, *, eos_id: int, pad_id: int,
                   dtype: str = "bfloat16") -> dict:
    """config.json for the served checkpoint (what vLLM 0.26.0 loads)."""
    tc = {k: v for k, v in text_config.items() if k not in ("architectures", "transformers_version")}
    tc.update(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None, dtype=dtype)
    # vLLM refuses --max-model-len above max_position_embeddings (and the tokenizer's
    # model_max_length); the CTX=huge preset asks for 245,760. RoPE has no length-dependent
    # parameters here (default rope, no scaling), so only the cap changes.
    tc["max_position_embeddings"] = max(int(tc.get("max_position_embeddings") or 0), SERVED_MAX_LEN)
    if variant == "dense":
        tc["architectures"] = ["Qwen3ForCausalLM"]
        tc["model_type"] = "qwen3"
        return tc
    tc["model_type"] = "qwen3_5_text"
    # Multimodal token ids: unused (language-model-only) but kept inside the vocabulary.
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": tc,
        "vision_config": dict(TINY_VISION, out_hidden_size=tc["hidden_size"]),
        "image_token_id": VOCAB - 4,
        "video_token_id": VOCAB - 3,
        "vision_start_token_id": VOCAB - 2,
        "vision_end_token_id": VOCAB - 1,
        "tie_word_embeddings": False,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "dtype": dtype,
    }


def serving_weight_name(variant: str, name: str) -> str:
    """Training (``*ForCausalLM``) parameter name -> name in the served checkpoint."""
    if variant == "hybrid" and name.startswith("model."):
        return "model.language_model." + name[len("model."):]
    return name


def training_weight_name(variant: str, name: str) -> str:
    if variant == "hybrid" and name.startswith("model.language_model."):
        return "model." + name[len("model.language_model."):]
    return name
