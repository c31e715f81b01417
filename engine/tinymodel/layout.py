"""Write/read the served checkpoint layout (config.json, model.safetensors, tokenizer)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .models import SERVED_MAX_LEN, serving_config, serving_weight_name, training_weight_name, HYBRID_TEXT, DENSE

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")


def save_served(model, variant: str, tok_dir: str | Path, out_dir: str | Path,
                extra: dict | None = None) -> Path:
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(Path(tok_dir) / "tokenizer.json"))
    eos, pad = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    sd = {serving_weight_name(variant, k): v.detach().to(torch.bfloat16).contiguous().cpu()
          for k, v in model.state_dict().items()}
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    text = HYBRID_TEXT if variant == "hybrid" else DENSE
    cfg = serving_config(variant, dict(text), eos_id=eos, pad_id=pad)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": eos, "pad_token_id": pad, "bos_token_id": None}, indent=2) + "\n")
    for f in TOKENIZER_FILES:
        shutil.copy(Path(tok_dir) / f, out / f)
    raise_served_max_len(out)
    if extra is not None:
        (out / "training.json").write_text(json.dumps(extra, indent=2) + "\n")
    return out


def raise_served_max_len(model_dir: str | Path, n: int = SERVED_MAX_LEN) -> None:
    """Lift the length caps vLLM derives max_model_len from (config.json's
    max_position_embeddings, tokenizer_config.json's model_max_length) to at least ``n``,
    so the CTX=huge preset (245,760) boots. Idempotent; also fixes an older layout."""
    d = Path(model_dir)
    cfg_p, tok_p = d / "config.json", d / "tokenizer_config.json"
    if cfg_p.is_file():
        cfg = json.loads(cfg_p.read_text())
        tc = cfg.get("text_config", cfg)
        if int(tc.get("max_position_embeddings") or 0) < n:
            tc["max_position_embeddings"] = n
            cfg_p.write_text(json.dumps(cfg, indent=2) + "\n")
    if tok_p.is_file():
        tk = json.loads(tok_p.read_text())
        if int(tk.get("model_max_length") or 0) < n:
            tk["model_max_length"] = n
            tok_p.write_text(json.dumps(tk, indent=2, ensure_ascii=False) + "\n")


def variant_of(model_dir: str | Path) -> str:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return "hybrid" if cfg.get("model_type") == "qwen3_5" else "dense"


def load_served(model_dir: str | Path, device: str = "cpu", dtype=None):
    """The served checkpoint back as a transformers *ForCausalLM (for checks)."""
    import torch
    from safetensors.torch import load_file
    d = Path(model_dir)
    cfg = json.loads((d / "config.json").read_text())
    variant = variant_of(d)
    if variant == "hybrid":
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
        tc = {k: v for k, v in cfg["text_config"].items() if k not in ("model_type", "dtype")}
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**tc))
    else:
        from transformers import Qwen3Config, Qwen3ForCausalLM
        tc = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "dtype")}
        model = Qwen3ForCausalLM(Qwen3Config(**tc))
    sd = {training_weight_name(variant, k): v for k, v in load_file(str(d / "model.safetensors")).items()}
    missing, unexpected = model.load_state_dict(sd, strict=True), None
    model = model.to(device=device, dtype=dtype or torch.bfloat16)
    return model
