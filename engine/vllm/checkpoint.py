"""What a local checkpoint needs from vLLM, read from its files (no torch, no vLLM).

A text-only model saved in a multimodal layout (``config.json`` with a ``vision_config``,
e.g. ``Qwen3_5ForConditionalGeneration``, the only registry entry vLLM 0.26.0 serves the
Qwen3.5 hybrid under) but without vision-tower weights fails to load unless vLLM is told
``--language-model-only``. ``engine/tinymodel``'s hybrid is one; so is any language-only
extract of a Qwen3.5 / Qwen3-VL checkpoint.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

VISION_MARKERS = ("visual.", "vision_tower.", "vision_model.", "vision_encoder.")


def tensor_names(model_dir: str | Path) -> list[str] | None:
    """Tensor names of a local safetensors checkpoint (index or single file), from the
    file headers only; None when there is no local safetensors checkpoint."""
    d = Path(model_dir)
    index = d / "model.safetensors.index.json"
    if index.is_file():
        return list(json.loads(index.read_text()).get("weight_map", {}))
    files = sorted(d.glob("*.safetensors"))
    if not files:
        return None
    names: list[str] = []
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        names += [k for k in header if k != "__metadata__"]
    return names


def language_model_only_reason(model_dir: str | Path) -> str | None:
    """Why the checkpoint needs ``--language-model-only``, or None when it does not (or
    cannot be read: a hub id, no config, no safetensors, vision weights present)."""
    d = Path(model_dir)
    try:
        cfg = json.loads((d / "config.json").read_text())
        if not cfg.get("vision_config"):
            return None
        names = tensor_names(d)
    except (OSError, ValueError, struct.error):
        return None
    if not names or any(m in n for n in names for m in VISION_MARKERS):
        return None
    arch = ",".join(cfg.get("architectures") or []) or cfg.get("model_type", "?")
    return (f"--language-model-only: {d.name} is saved as multimodal {arch} (config has a "
            f"vision_config) but holds no vision-tower weights")


def mtp_head_problem(model_dir: str | Path) -> str | None:
    """Why ``method: mtp`` cannot run on this local checkpoint, or None when it has an MTP
    head (or cannot be read: a hub id). vLLM 0.26.0 takes the draft's layer count from
    ``text_config.mtp_num_hidden_layers`` (0 when absent) and its weights from the
    checkpoint's ``mtp.*`` tensors (``Qwen3_5MTP``, and the other MTP families likewise)."""
    d = Path(model_dir)
    try:
        cfg = json.loads((d / "config.json").read_text())
        names = tensor_names(d)
    except (OSError, ValueError, struct.error):
        return None
    if names is None:
        return None
    tc = cfg.get("text_config") or cfg
    layers = tc.get("mtp_num_hidden_layers") or tc.get("num_nextn_predict_layers") or 0
    has_tensors = any(n.startswith("mtp.") or ".mtp." in n for n in names)
    if layers and has_tensors:
        return None
    missing = [w for w, ok in (("no mtp.* tensors", has_tensors),
                               ("no text_config.mtp_num_hidden_layers", bool(layers))) if not ok]
    return (f"{d} has no MTP head ({', '.join(missing)}); train one with "
            "`python -m engine.tinymodel mtp-train` or use --spec ngram")
