"""The tiny hybrid's MTP head, in the layout vLLM 0.26.0's ``Qwen3_5MTP`` loads.

What vLLM 0.26.0 reads (``vllm/model_executor/models/qwen3_5_mtp.py``, checked in the wheel):

- the draft model is the target checkpoint itself: ``method: mtp`` and no ``model``; the
  draft architecture ``Qwen3_5MTP`` comes from ``SpeculativeConfig.hf_config_override``
  (model_type ``qwen3_5``), and the draft's layer count from
  ``text_config.mtp_num_hidden_layers`` (``Qwen3_5MTPModelArchConfigConvertor``; absent
  means 0 layers, so the served config must carry it);
- 15 tensors ``mtp.*`` (the loader rewrites ``mtp.`` to ``model.``): ``fc.weight`` [H, 2H]
  over ``cat(pre_fc_norm_embedding(embed(t+1)), pre_fc_norm_hidden(h_t))``, the three
  norms, and one full-attention decoder layer ``layers.0.*`` shaped like the target's
  (gated ``q_proj`` has 2 x heads x head_dim rows, ``q_norm`` / ``k_norm`` on the head dim);
- every norm is Qwen3.5's zero-centred RMSNorm: scale ``1 + w``;
- ``embed_tokens`` and ``lm_head`` are the target's (``_maybe_share_embeddings`` /
  ``_maybe_share_lm_head``: "Detected MTP model. Sharing ...");
- ``h_t`` is the target's last hidden state after its final norm, and step s > 1 gets the
  head's own output (after ``mtp.norm``) at the previous position;
- ``--mamba-cache-mode all`` is refused (``NotImplementedError``); ``align`` is required.

This module is torch-only (no transformers) so the same code trains on the GPU and checks
on a CPU in CI. Names and shapes are data (:func:`expected_shapes`), testable without torch.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

MTP_FILE = "mtp.safetensors"
MTP_PREFIX = "mtp."


def expected_shapes(text_config: dict) -> dict[str, tuple[int, ...]]:
    """The 15 ``mtp.*`` tensors vLLM 0.26.0's ``Qwen3_5MTP`` loader needs, with shapes."""
    h = int(text_config["hidden_size"])
    heads, kv = int(text_config["num_attention_heads"]), int(text_config["num_key_value_heads"])
    hd = int(text_config.get("head_dim") or h // heads)
    inter = int(text_config["intermediate_size"])
    layer = {
        "input_layernorm.weight": (h,),
        "post_attention_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (2 * heads * hd, h),  # query and output gate
        "self_attn.k_proj.weight": (kv * hd, h),
        "self_attn.v_proj.weight": (kv * hd, h),
        "self_attn.o_proj.weight": (h, heads * hd),
        "self_attn.q_norm.weight": (hd,),
        "self_attn.k_norm.weight": (hd,),
        "mlp.gate_proj.weight": (inter, h),
        "mlp.up_proj.weight": (inter, h),
        "mlp.down_proj.weight": (h, inter),
    }
    out = {f"{MTP_PREFIX}fc.weight": (h, 2 * h),
           f"{MTP_PREFIX}pre_fc_norm_embedding.weight": (h,),
           f"{MTP_PREFIX}pre_fc_norm_hidden.weight": (h,),
           f"{MTP_PREFIX}norm.weight": (h,)}
    for i in range(max(1, int(text_config.get("mtp_num_hidden_layers") or 1))):
        out.update({f"{MTP_PREFIX}layers.{i}.{k}": v for k, v in layer.items()})
    return out


def safetensors_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from a safetensors header (no torch)."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    return {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}


def check_layout(model_dir: str | Path) -> list[str]:
    """What would stop vLLM 0.26.0 from loading the MTP head of ``model_dir``: an empty
    list when the config and the ``mtp.*`` tensors are what ``Qwen3_5MTP`` expects."""
    d = Path(model_dir)
    cfg = json.loads((d / "config.json").read_text())
    tc = cfg.get("text_config", cfg)
    problems = []
    if cfg.get("model_type") != "qwen3_5":
        problems.append(f"model_type {cfg.get('model_type')!r}: vLLM maps only qwen3_5 to Qwen3_5MTP")
    if int(tc.get("mtp_num_hidden_layers") or 0) < 1:
        problems.append("text_config.mtp_num_hidden_layers missing or 0: the draft gets no layer")
    have: dict[str, tuple[int, ...]] = {}
    for f in sorted(d.glob("*.safetensors")):
        have.update({k: v for k, v in safetensors_shapes(f).items() if k.startswith(MTP_PREFIX)})
    want = expected_shapes(tc)
    for name, shape in want.items():
        if name not in have:
            problems.append(f"missing {name} {list(shape)}")
        elif have[name] != shape:
            problems.append(f"{name}: shape {list(have[name])}, vLLM expects {list(shape)}")
    problems += [f"unexpected {n} (vLLM's loader would fail on it)" for n in have if n not in want]
    return problems


# ----------------------------------------------------------------------------- torch part
def _torch_modules():
    from .mtp_head import MTPHead   # torch: imported when a head is built
    return MTPHead


def build_head(text_config: dict):
    """A fresh (untrained) head for this target geometry."""
    tc = dict(text_config)
    tc.setdefault("mtp_num_hidden_layers", 1)
    return _torch_modules()(tc)


def init_from_target(head, target_state: dict, layer: int) -> None:
    """Start the head's decoder layer from the target's full-attention layer ``layer``
    (training names ``model.layers.N.*``): same shapes, and a better start than noise."""
    import torch
    prefix = f"model.layers.{layer}."
    own = head.layers[0].state_dict()
    with torch.no_grad():
        for k in own:
            own[k].copy_(target_state[prefix + k])


def head_state_for_checkpoint(head) -> dict:
    """``mtp.*`` name -> bf16 tensor, as the checkpoint stores them."""
    import torch
    return {MTP_PREFIX + k: v.detach().to(torch.bfloat16).contiguous().cpu()
            for k, v in head.state_dict().items()}


def save_into(model_dir: str | Path, head, info: dict | None = None) -> Path:
    """Write the head beside the target: ``mtp.safetensors`` (vLLM's default loader reads
    every ``*.safetensors`` of a checkpoint without an index; the target's own loader skips
    ``mtp.*``), ``text_config.mtp_num_hidden_layers`` in config.json, and
    ``training_mtp.json`` with the provenance."""
    from safetensors.torch import save_file
    d = Path(model_dir)
    save_file(head_state_for_checkpoint(head), str(d / MTP_FILE), metadata={"format": "pt"})
    cfg_p = d / "config.json"
    cfg = json.loads(cfg_p.read_text())
    cfg.setdefault("text_config", cfg)["mtp_num_hidden_layers"] = len(head.layers)
    cfg_p.write_text(json.dumps(cfg, indent=2) + "\n")
    if info is not None:
        (d / "training_mtp.json").write_text(json.dumps(info, indent=2) + "\n")
    return d / MTP_FILE


def load_head(model_dir: str | Path, device: str = "cpu", dtype=None):
    """The committed head back as a module (for checks)."""
    import torch
    from safetensors.torch import load_file
    d = Path(model_dir)
    tc = json.loads((d / "config.json").read_text())["text_config"]
    head = build_head(tc)
    sd = {k[len(MTP_PREFIX):]: v for k, v in load_file(str(d / MTP_FILE)).items()}
    head.load_state_dict(sd, strict=True)
    return head.to(device=device, dtype=dtype or torch.bfloat16).eval()
