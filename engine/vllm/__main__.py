"""``python -m engine.vllm --spec mtp --ctx huge --model DIR [--port N] [--gpu 0] ...``

Prints the exact vLLM server command for a preset, its environment and the preset's
reasons, without a GPU and without importing vLLM.
"""
from __future__ import annotations

import argparse
import json
import sys

from engine.presets import CTXS, CUDAGRAPH_MODES, SPECS, PresetError, resolve

from .launch import HybridOptions, LaunchError, build_launch


def _bool(v: str) -> bool:
    if v.lower() in ("1", "true", "yes", "on"):
        return True
    if v.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected 0/1, got {v!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.vllm", description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="mtp", choices=SPECS)
    ap.add_argument("--ctx", default="huge", choices=CTXS)
    ap.add_argument("--draft-tokens", type=int)
    ap.add_argument("--prefix-cache", type=_bool, help="PREFIX_CACHE=0/1")
    ap.add_argument("--kv-mem", type=int, help="KV_MEM in bytes")
    ap.add_argument("--cudagraph-mode", choices=CUDAGRAPH_MODES)
    ap.add_argument("--block-size", type=int)
    ap.add_argument("--prefix-match-unit", type=int, help="0 drops it")
    ap.add_argument("--max-model-len", type=int)
    ap.add_argument("--patches", default="all", help="all | none | comma list")
    ap.add_argument("--model", default="/path/to/model")
    ap.add_argument("--served-model-name")
    ap.add_argument("--draft-model", help="DFlash drafter checkpoint (SPEC=dflash2)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--gpu")
    ap.add_argument("--hybrid", action="store_true",
                    help="hybrid GDN/Mamba model: --mamba-cache-mode align, triton GDN prefill")
    ap.add_argument("--language-model-only", action="store_true")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    try:
        cfg = resolve(args.spec, args.ctx, engine="vllm", model=args.model,
                      patches=args.patches, draft_tokens=args.draft_tokens,
                      prefix_caching=args.prefix_cache, kv_cache_memory_bytes=args.kv_mem,
                      cudagraph_mode=args.cudagraph_mode, block_size=args.block_size,
                      prefix_match_unit=args.prefix_match_unit,
                      max_model_len=args.max_model_len)
        hybrid: bool | HybridOptions = False
        if args.hybrid or args.language_model_only:
            hybrid = HybridOptions(language_model_only=args.language_model_only)
        draft = args.draft_model
        if cfg.method == "dflash" and not draft:
            draft = "/path/to/dflash-drafter"
        launch = build_launch(cfg, port=args.port, host=args.host, model=args.model,
                              served_model_name=args.served_model_name, gpu=args.gpu,
                              hybrid=hybrid, draft_model=draft)
    except (PresetError, LaunchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"label": cfg.label(), "config": cfg.identity(), "argv": launch.argv,
                          "env": launch.env, "notes": list(launch.notes),
                          "overrides": list(cfg.overrides)}, indent=2))
        return 0
    print(f"# {cfg.label()}")
    for note in launch.notes:
        print(f"# {note}")
    for o in cfg.overrides:
        print(f"# override: {o}")
    print(launch.shell())
    return 0


if __name__ == "__main__":
    sys.exit(main())
