"""Model shapes without weights, for vLLM's ``--load-format dummy`` (issue 35): config folders
of Qwen3.5-style hybrids shaped like the users' 27B model and two smaller classes (~2B, ~9B).

Each folder holds ``config.json`` (``Qwen3_5ForConditionalGeneration``, model_type
``qwen3_5``: a ``text_config`` with the published shape and the tiny ``vision_config`` the
committed tiny hybrid has, as ``engine/tinymodel/layout.py`` writes it) and the committed
tokenizer files of ``engine/tinymodel/weights/hybrid`` (tokenizer, chat template,
generation config). No weights: vLLM's dummy loader fills every parameter at random, which
is all a cost measurement needs and makes every answer noise. **Cost only, no verdicts**:
``sweep`` refuses ``--load-format dummy`` (``harness/options.py``).

Where each number comes from: ``benchmarks/shapes/README.md``. The vocabulary is the
committed checkpoint's (4,096 rows: its tokenizer's 894 ids, padding, the four multimodal
ids), not the real 248,320: the prompts are tokenised by the committed tokenizer, and a row
the tokenizer cannot name is never a prompt token. :func:`count_params` says how many
parameters that removes.

    python benchmarks/shapes/make_shapes.py --write     # (re)writes the folders
    python benchmarks/shapes/make_shapes.py --check     # exit 1 when a folder differs
    python benchmarks/shapes/make_shapes.py             # the parameter table
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TINY = ROOT / "engine" / "tinymodel" / "weights" / "hybrid"
COPIED = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
          "generation_config.json")
REAL_VOCAB = 248_320   # every Qwen3.5 model card: "Token Embedding: 248,320 (padded)"

# The published shapes (README.md: the source of each number). Shared by all three:
# head_dim 256, GDN key/value head dims 128, conv kernel 4, one full-attention layer in four,
# partial rotary 0.25 with interleaved mrope sections [11, 11, 10], rope theta 1e7,
# RMSNorm eps 1e-6, SiLU, the recurrent state kept in float32, one MTP layer.
SHAPES: dict[str, dict] = {
    "qwen35-2b-dummy": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                            num_attention_heads=8, num_key_value_heads=2,
                            linear_num_key_heads=16, linear_num_value_heads=16,
                            tie_word_embeddings=True),
    "qwen35-9b-dummy": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
                            num_attention_heads=16, num_key_value_heads=4,
                            linear_num_key_heads=16, linear_num_value_heads=32,
                            tie_word_embeddings=False),
    "qwen35-27b-dummy": dict(hidden_size=5120, intermediate_size=17408, num_hidden_layers=64,
                             num_attention_heads=24, num_key_value_heads=4,
                             linear_num_key_heads=16, linear_num_value_heads=48,
                             tie_word_embeddings=False),
}
COMMON = dict(
    head_dim=256, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
    full_attention_interval=4, hidden_act="silu", rms_norm_eps=1e-6, attention_bias=False,
    attention_dropout=0.0, attn_output_gate=True, mamba_ssm_dtype="float32",
    mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False, initializer_range=0.02,
    use_cache=True, max_position_embeddings=262_144,
    rope_parameters=dict(rope_type="default", rope_theta=10_000_000, partial_rotary_factor=0.25,
                         mrope_section=[11, 11, 10], mrope_interleaved=True),
)


def tiny_config() -> dict:
    return json.loads((TINY / "config.json").read_text())


def text_config(name: str) -> dict:
    """The ``text_config`` of shape ``name``: its published numbers, the committed
    checkpoint's vocabulary and token ids."""
    tiny = tiny_config()
    tt, shape = tiny["text_config"], SHAPES[name]
    n = shape["num_hidden_layers"]
    every = COMMON["full_attention_interval"]
    layers = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    return {"model_type": "qwen3_5_text", "vocab_size": tt["vocab_size"], **COMMON, **shape,
            "layer_types": layers, "eos_token_id": tt["eos_token_id"],
            "pad_token_id": tt["pad_token_id"], "bos_token_id": None, "dtype": "bfloat16"}


def config(name: str) -> dict:
    """``config.json`` of shape ``name``: the committed tiny hybrid's layout (architecture,
    vision stub, multimodal ids, token ids) around this shape's ``text_config``."""
    tiny = tiny_config()
    tc = text_config(name)
    keep = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
            "eos_token_id", "pad_token_id", "dtype")
    return {"architectures": tiny["architectures"], "model_type": tiny["model_type"],
            "text_config": tc,
            "vision_config": dict(tiny["vision_config"], out_hidden_size=tc["hidden_size"]),
            **{k: tiny[k] for k in keep}, "tie_word_embeddings": tc["tie_word_embeddings"]}


def count_params(tc: dict, vocab: int | None = None) -> dict[str, int]:
    """Parameters of the language model vLLM builds from ``tc`` (``--language-model-only``;
    the MTP layer is built only for ``--speculative-config`` MTP, the vision tower never),
    by part. ``vocab`` replaces the config's vocabulary (e.g. :data:`REAL_VOCAB`)."""
    h, inter = tc["hidden_size"], tc["intermediate_size"]
    v = vocab or tc["vocab_size"]
    kinds = tc["layer_types"]
    hd, nh, nkv = tc["head_dim"], tc["num_attention_heads"], tc["num_key_value_heads"]
    nk, nv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    dk, dv, kern = tc["linear_key_head_dim"], tc["linear_value_head_dim"], tc["linear_conv_kernel_dim"]
    q_out = nh * hd * (2 if tc.get("attn_output_gate", True) else 1)   # query and its gate
    attention = (q_out + 2 * nkv * hd) * h + nh * hd * h + 2 * hd      # q|gate, k, v, o, q/k norms
    conv_dim = 2 * nk * dk + nv * dv
    gdn = ((conv_dim + nv * dv) * h      # in_proj: q, k, v and the output gate z
           + 2 * nv * h                  # in_proj: b (beta) and a (decay)
           + conv_dim * kern             # the causal depthwise conv
           + 2 * nv + dv                 # dt_bias, A_log, the gated norm
           + nv * dv * h)                # out_proj
    parts = {"embed": v * h,
             "lm_head": 0 if tc["tie_word_embeddings"] else v * h,
             "mlp_and_norms": len(kinds) * (3 * inter * h + 2 * h) + h,
             "full_attention": kinds.count("full_attention") * attention,
             "gdn": kinds.count("linear_attention") * gdn}
    parts["total"] = sum(parts.values())
    return parts


def kv_geometry(tc: dict, *, block: int = 128, spec_tokens: int = 3,
                max_model_len: int = 245_760) -> dict[str, int]:
    """The KV pool's page arithmetic vLLM 0.26.0 does for this shape at the CTX=huge
    geometry (``platforms/interface.py`` ``_align_hybrid_block_size``; ``MambaSpec`` /
    ``FullAttentionSpec`` in ``v1/kv_cache_interface.py``; mamba cache mode ``align``; the
    test checks it against vLLM's own classes): a GDN state page (float32 recurrent state,
    bf16 conv state with ``spec_tokens`` more columns), the attention block grown to a
    multiple of ``block`` whose page holds it, and the bytes one request of
    ``max_model_len`` needs (vLLM refuses to boot on less)."""
    nk, nv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    dk, dv = tc["linear_key_head_dim"], tc["linear_value_head_dim"]
    conv_dim = 2 * nk * dk + nv * dv
    state_bytes = {"float32": 4, "bfloat16": 2}[tc.get("mamba_ssm_dtype", "bfloat16")]
    mamba_page = (conv_dim * (tc["linear_conv_kernel_dim"] - 1 + spec_tokens) * 2
                  + nv * dv * dk * state_bytes)
    attn_token = 2 * tc["num_key_value_heads"] * tc["head_dim"] * 2    # K and V, bf16
    block_size = block * -(-mamba_page // (block * attn_token))
    page = block_size * attn_token
    n_full = tc["layer_types"].count("full_attention")
    n_gdn = len(tc["layer_types"]) - n_full
    need = n_full * -(-max_model_len // block_size) * page + n_gdn * (2 + spec_tokens) * page
    return {"mamba_page_bytes": mamba_page, "attn_bytes_per_token_layer": attn_token,
            "block_size": block_size, "page_bytes": page, "max_len_request_bytes": need}


def files(name: str) -> dict[str, bytes]:
    """Every file of shape ``name``'s folder, as it must be."""
    out = {"config.json": (json.dumps(config(name), indent=2) + "\n").encode()}
    out.update((f, (TINY / f).read_bytes()) for f in COPIED)
    return out


def write(root: Path = HERE) -> None:
    for name in SHAPES:
        d = root / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        for fname, data in files(name).items():
            (d / fname).write_bytes(data)


def differences(root: Path = HERE) -> list[str]:
    """Each committed folder's file that is missing, extra or not what :func:`files` makes."""
    bad = []
    for name in SHAPES:
        want, d = files(name), root / name
        have = {p.name for p in d.iterdir()} if d.is_dir() else set()
        bad += [f"{name}/{f}: extra" for f in sorted(have - set(want))]
        bad += [f"{name}/{f}: " + ("missing" if f not in have else "differs")
                for f, data in want.items() if f not in have or (d / f).read_bytes() != data]
    return bad


def table() -> str:
    rows = ["| shape | layers (GDN + full) | params built (vocab 4,096) | with the real vocab "
            "(248,320) | removed | bf16 weights built |", "|---|---|---|---|---|---|"]
    for name in SHAPES:
        tc = text_config(name)
        built, real = count_params(tc)["total"], count_params(tc, REAL_VOCAB)["total"]
        n_full = tc["layer_types"].count("full_attention")
        rows.append(f"| {name} | {len(tc['layer_types'])} ({len(tc['layer_types']) - n_full} + "
                    f"{n_full}) | {built:,} | {real:,} | {real - built:,} "
                    f"({100 * (real - built) / real:.1f}%) | {2 * built / 2**30:.2f} GiB |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="(re)write the shape folders")
    ap.add_argument("--check", action="store_true", help="exit 1 when a folder differs")
    a = ap.parse_args(argv)
    if a.write:
        write()
    if a.check:
        bad = differences()
        for line in bad:
            print(line, file=sys.stderr)
        return 1 if bad else 0
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
