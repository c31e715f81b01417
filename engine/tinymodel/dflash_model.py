"""A DFlash drafter for the tiny hybrid, in PyTorch, computing what vLLM 0.26.0's
``DFlashQwen3ForCausalLM`` (``vllm/model_executor/models/qwen3_dflash.py``, driven by
``vllm/v1/spec_decode/dflash.py``) computes, and saved in the layout that loader reads.

What vLLM does with method ``dflash`` (read in the 0.26.0 wheel):

* The target returns the residual stream after each decoder layer ``i`` in
  ``dflash_config.target_layer_ids`` (the runner adds 1: aux layer ``i + 1`` is the
  output of layer ``i``; 0 would be the embeddings), concatenated in layer order.
  ``fc`` maps that ``[T, n * H]`` to ``[T, H]`` (``combine_hidden_states``).
* Context: every token the target verified becomes draft KV only, never a query:
  ``hidden_norm`` (RMSNorm) -> each draft layer's ``k_proj``/``v_proj`` -> ``k_norm``
  -> RoPE at the token's position -> the draft layer's KV cache
  (``precompute_and_store_context_kv``).
* Query block, one per request and step: ``[bonus, mask x k]`` at positions
  ``p+1 .. p+1+k`` (``p`` = last accepted position; ``mask`` = ``mask_token_id``,
  embedded with the target's shared ``embed_tokens``), through the draft layers
  (pre-norm Qwen3 blocks: q/k RMSNorm per head, RoPE, GQA) attending to all context KV
  up to ``p`` and, non-causally, to the whole block (``causal`` is False unless a layer
  is sliding-window). The final ``norm`` and the target's shared ``lm_head`` give the
  logits; mask slot ``j`` proposes the token AT position ``p+1+j`` (k proposals).
* Weights in the checkpoint: ``layers.N.{input_layernorm, post_attention_layernorm,
  self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, mlp.{gate,up,down}_proj}``, ``fc``,
  ``hidden_norm``, ``norm``; no ``embed_tokens`` / ``lm_head`` -> shared from the
  target (``_maybe_share_embeddings`` / ``_maybe_share_lm_head``). ``q/k/v`` and
  ``gate/up`` are stacked by ``DFlashQwen3Model.hf_to_vllm_mapper``. vLLM's RMSNorm is
  ``x * w`` (not Gemma's ``1 + w``).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .dflash_kv_groups import DEFAULT_NUM_LAYERS
from .models import HYBRID_TEXT, SERVED_MAX_LEN, VOCAB

__all__ = ["DEFAULT_NUM_LAYERS", "DEFAULT_TARGET_LAYER_IDS", "MASK_TOKEN_ID", "DFlashDrafter",
           "drafter_config", "expected_tensor_shapes", "load_drafter", "save_drafter"]

#: An embedding row the tokenizer never emits (it uses ids < 894; 4092..4095 are the
#: multimodal placeholders): the mask slots' input, looked up in the target's embed_tokens.
MASK_TOKEN_ID = VOCAB - 5
#: Every target layer (0-based): a 6-layer target gives 6 x 256 features to ``fc``.
DEFAULT_TARGET_LAYER_IDS = (0, 1, 2, 3, 4, 5)


def drafter_config(*, num_layers: int = DEFAULT_NUM_LAYERS,
                   target_layer_ids=DEFAULT_TARGET_LAYER_IDS,
                   block_size: int = 8, mask_token_id: int = MASK_TOKEN_ID) -> dict:
    """config.json of the drafter: Qwen3-style (what vLLM's ModelConfig reads with
    AutoConfig), architecture ``DFlashDraftModel``, plus ``dflash_config``. Attention
    geometry equals the target's full-attention layers (4 heads, 2 KV heads x 64) so the
    draft layers' KV cache spec matches the target's attention layers."""
    t = HYBRID_TEXT
    ids = sorted(int(i) for i in target_layer_ids)
    if not ids or ids[0] < 0 or ids[-1] >= t["num_hidden_layers"] or len(set(ids)) != len(ids):
        raise ValueError(f"target_layer_ids must be distinct layers 0..{t['num_hidden_layers'] - 1}")
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": t["vocab_size"],
        "hidden_size": t["hidden_size"],
        "intermediate_size": t["intermediate_size"],
        "num_hidden_layers": num_layers,
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": t["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": SERVED_MAX_LEN,
        "rms_norm_eps": t["rms_norm_eps"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": num_layers,
        "tie_word_embeddings": False,
        "num_target_layers": t["num_hidden_layers"],
        "block_size": block_size,
        "dflash_config": {"mask_token_id": int(mask_token_id), "target_layer_ids": ids},
        "dtype": "bfloat16",
    }


def expected_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Checkpoint tensor name -> shape that vLLM 0.26.0's DFlash loader consumes for ``cfg``
    (q/k/v rows: heads x head_dim; fc input: hidden x len(target_layer_ids))."""
    h, hd, inter = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    n_feat = len(cfg["dflash_config"]["target_layer_ids"])
    out: dict[str, tuple[int, ...]] = {"fc.weight": (h, h * n_feat), "hidden_norm.weight": (h,),
                                       "norm.weight": (h,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        out.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
        })
    return out


# ----------------------------------------------------------------------------- modules
class RMSNorm(nn.Module):
    """vLLM's RMSNorm.forward_native: normalise in fp32, cast back, then ``* weight``."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight.to(x.dtype)


def rope_cos_sin(positions, head_dim: int, theta: float, dtype):
    """Neox-style (rotate-half) RoPE over the full head, as vLLM's default get_rope."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                        dtype=torch.float32) / head_dim))
    f = positions.float()[..., None] * inv
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x: [B, N, heads, hd]; cos/sin: [B, N, hd] (cast to x's dtype, as vLLM's bf16 cache)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, :, None] + rot * sin[:, :, None]


class DraftAttention(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        h, self.hd = cfg["hidden_size"], cfg["head_dim"]
        self.nh, self.nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.q_proj = nn.Linear(h, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, h, bias=False)
        self.q_norm = RMSNorm(self.hd, cfg["rms_norm_eps"])
        self.k_norm = RMSNorm(self.hd, cfg["rms_norm_eps"])

    def kv(self, x, cos, sin):
        """K (normed, rotated) and V of ``x`` [B, N, H]: used for both the context
        (x = hidden_norm(fc(aux))) and the query block (x = input_layernorm(h))."""
        B, N, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(B, N, self.nkv, self.hd))
        v = self.v_proj(x).view(B, N, self.nkv, self.hd)
        return apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask):
        B, N, _ = x.shape
        q = apply_rope(self.q_norm(self.q_proj(x).view(B, N, self.nh, self.hd)), cos, sin)
        k, v = self.kv(x, cos, sin)
        k = torch.cat([ctx_k, k], dim=1).transpose(1, 2)
        v = torch.cat([ctx_v, v], dim=1).transpose(1, 2)
        rep = self.nh // self.nkv  # GQA: query head i reads KV head i // rep
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask)
        return self.o_proj(o.transpose(1, 2).reshape(B, N, self.nh * self.hd))


class DraftLayer(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        h, inter, eps = cfg["hidden_size"], cfg["intermediate_size"], cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = DraftAttention(cfg)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(h, inter, bias=False)
        self.mlp.up_proj = nn.Linear(h, inter, bias=False)
        self.mlp.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, h, cos, sin, ctx, ctx_cos, ctx_sin, mask):
        ctx_k, ctx_v = self.self_attn.kv(ctx, ctx_cos, ctx_sin)
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, ctx_k, ctx_v, mask)
        x = self.post_attention_layernorm(h)
        return h + self.mlp.down_proj(F.silu(self.mlp.gate_proj(x)) * self.mlp.up_proj(x))


class DFlashDrafter(nn.Module):
    """The draft model without embeddings and lm_head (vLLM shares the target's)."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg
        h, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        n_feat = len(cfg["dflash_config"]["target_layer_ids"])
        self.layers = nn.ModuleList(DraftLayer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.fc = nn.Linear(h * n_feat, h, bias=False)
        self.hidden_norm = RMSNorm(h, eps)
        self.norm = RMSNorm(h, eps)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, aux, block_embeds, anchors, valid):
        """Drafter hidden states for several query blocks per sequence at once.

        aux: [B, T, n*H] target features of every position (position = index);
        block_embeds: [B, NB, K+1, H] embeddings of ``[bonus, mask x K]``;
        anchors: [B, NB] position of each block's bonus token ``a`` (its context is the
        target features at positions < a, exactly what vLLM has cached then);
        valid: [B, NB] bool, False for padding blocks.
        Returns [B, NB, K+1, H] after the final norm.
        """
        B, T, _ = aux.shape
        _, NB, K1, H = block_embeds.shape
        theta = float(self.cfg["rope_parameters"]["rope_theta"])
        hd = self.cfg["head_dim"]
        ctx = self.hidden_norm(self.fc(aux))
        ctx_pos = torch.arange(T, device=aux.device).expand(B, T)
        ctx_cos, ctx_sin = rope_cos_sin(ctx_pos, hd, theta, torch.float32)
        q_pos = (anchors[:, :, None] + torch.arange(K1, device=aux.device)).reshape(B, NB * K1)
        cos, sin = rope_cos_sin(q_pos, hd, theta, torch.float32)
        mask = block_mask(anchors, valid, T, K1)
        h = block_embeds.reshape(B, NB * K1, H)
        for layer in self.layers:
            h = layer(h, cos, sin, ctx, ctx_cos, ctx_sin, mask)
        return self.norm(h).view(B, NB, K1, H)


def block_mask(anchors, valid, T: int, K1: int):
    """[B, 1, NB*K1, T + NB*K1] bool (True = may attend): a block's queries see context
    positions < its anchor and every slot of their own block (non-causal), nothing else.
    Padding blocks see only themselves (no all-False row, so no NaN)."""
    B, NB = anchors.shape
    dev = anchors.device
    ctx_ok = torch.arange(T, device=dev)[None, None, :] < anchors[:, :, None]  # [B, NB, T]
    ctx_ok = ctx_ok & valid[:, :, None]
    ctx_ok = ctx_ok.repeat_interleave(K1, dim=1)  # [B, Q, T]
    blk = torch.arange(NB, device=dev).repeat_interleave(K1)
    own = (blk[:, None] == blk[None, :]).expand(B, -1, -1)  # [B, Q, Q]
    return torch.cat([ctx_ok, own], dim=-1)[:, None]


# ----------------------------------------------------------------------------- layout
def save_drafter(drafter: DFlashDrafter, out_dir: str | Path, extra: dict | None = None) -> Path:
    """config.json + model.safetensors (bf16, the checkpoint names vLLM 0.26.0 loads) +
    training.json (``extra``)."""
    from safetensors.torch import save_file
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu()
          for k, v in drafter.state_dict().items()}
    want = expected_tensor_shapes(drafter.cfg)
    if {k: tuple(v.shape) for k, v in sd.items()} != want:
        raise AssertionError("drafter state_dict does not match the vLLM DFlash layout")
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(drafter.cfg, indent=2) + "\n")
    if extra is not None:
        (out / "training.json").write_text(json.dumps(extra, indent=2) + "\n")
    return out


def load_drafter(model_dir: str | Path, device: str = "cpu", dtype=torch.float32) -> DFlashDrafter:
    from safetensors.torch import load_file
    d = Path(model_dir)
    cfg = json.loads((d / "config.json").read_text())
    drafter = DFlashDrafter(cfg)
    drafter.load_state_dict(load_file(str(d / "model.safetensors")), strict=True)
    return drafter.to(device=device, dtype=dtype)
