"""python -m engine.tinymodel {tokenizer,train,check,mtp-train,mtp-check,train-dflash,probe} ...

  tokenizer OUT_DIR
      Train the byte-level BPE tokenizer on the project corpus and write tokenizer.json,
      tokenizer_config.json (ChatML template, eos <|im_end|>), vocab.json, merges.txt.
      CPU, ~5 s. The committed copy lives in engine/tinymodel/tokenizer/.

  train --variant {hybrid,dense} --out DIR [--tokenizer DIR] [--time-cap S] [--seed N]
        [--init DIR --start-stage 4] [--harness-seeds 0,1,2]
      GPU. Curriculum training on the harness-shaped copy task (see train.py), or more
      training of a saved checkpoint (--init), then a fresh-prompt check of the bf16
      weights and the served layout written to DIR (config.json, model.safetensors,
      generation_config.json, tokenizer files, training.json with the curve and metrics).
      The committed engine/tinymodel/weights/hybrid was made by a from-scratch run (320 s)
      and one --init run (328 s) on an H200 (docs/gpu-notes.md, phases 2 and 3).

  check DIR [--n N] [--device cuda] [--harness-seeds 0,1,2]
      Load a served checkpoint with transformers and report exact match and worst-token
      logit margins on fresh prompts (random final-stage conversations from unseen seeds,
      and the harness's own plans at context 1,200: all 128 residues), plus real greedy
      decoding of a few plans.

  mtp-train --target DIR --out DIR [--time-cap S] [--steps 3]
      GPU. Train an MTP head on the frozen target (engine/tinymodel/weights/hybrid) to
      predict token t+2 (and chain to t+k, as vLLM runs it); write DIR = a copy of the
      target plus mtp.safetensors, text_config.mtp_num_hidden_layers and
      training_mtp.json (curve, teacher-forced acceptance for k = 1 and 3). See mtp.py.

  mtp-check DIR [--k 3] [--residues 0-127] [--device cpu]
      The layout check (the 15 mtp.* names and shapes vLLM 0.26.0's Qwen3_5MTP loads) and
      the teacher-forced acceptance estimate (tok/step) on the harness's plans.

  train-dflash --out DIR [--target DIR] [--time-cap S] [--layers N] [--k 7]
      GPU, ~4 min on one H200. A DFlash drafter (vLLM method dflash) trained against the
      frozen hybrid's hidden states on the copy task; see dflash_train.py.

  probe --model DIR --out DIR [...]
      On a machine with vLLM: boot `vllm serve`-equivalent servers on the model (setsid,
      /health poll), send harness-planned prompts cold and again (self-hit), record
      answers, usage and the log lines about runner / graph mode / KV. See probe.py.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_TOKENIZER = HERE / "tokenizer"


def _cmd_tokenizer(a) -> int:
    from .tokenizer import build_tokenizer, check_tokenizer, save_tokenizer
    tok = build_tokenizer()
    save_tokenizer(tok, a.out_dir)
    print(json.dumps({"vocab": tok.get_vocab_size(), **check_tokenizer(a.out_dir)}))
    return 0


def _cmd_train(a) -> int:
    import torch
    from .layout import save_served
    from .train import evaluate, greedy_generate_check, train
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    logf = open(Path(a.out).parent / f"train_{a.variant}.log", "a") if a.log_next_to_out else None

    def log(msg: str) -> None:
        print(msg, flush=True)
        if logf:
            logf.write(msg + "\n")
            logf.flush()
    model, info = train(a.variant, str(a.tokenizer), time_cap=a.time_cap, seed=a.seed,
                        target_em=a.target_em, lr=a.lr, workers=a.workers, log=log,
                        extra_steps=a.extra_steps, final_decay=a.final_decay,
                        init_dir=a.init, start_stage=a.start_stage, warmup=a.warmup)
    t = time.time()
    model = model.to(torch.bfloat16)  # what is served
    info["final_check_bf16"] = evaluate(model, str(a.tokenizer), n=a.n, seed=4242,
                                        harness_seeds=a.harness_seeds)
    info["greedy_generate"] = greedy_generate_check(model, str(a.tokenizer))
    info["check_seconds"] = round(time.time() - t, 1)
    log(json.dumps({k: v for k, v in info.items() if k != "curve"}))
    save_served(model, a.variant, a.tokenizer, a.out, extra=info)
    return 0


def _cmd_check(a) -> int:
    import torch
    from .layout import load_served
    from .train import evaluate, greedy_generate_check
    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = load_served(a.model_dir, device=dev)
    res = evaluate(model, a.model_dir, n=a.n, seed=a.seed, harness_seeds=a.harness_seeds)
    res["greedy_generate"] = greedy_generate_check(model, a.model_dir)
    print(json.dumps(res, indent=2))
    return 0 if res["exact_match"] >= a.min_em else 1


def _cmd_mtp_train(a) -> int:
    import shutil
    from .mtp_train import main_train
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if Path(a.out).resolve() != Path(a.target).resolve():
        shutil.copytree(a.target, a.out, dirs_exist_ok=True)
    main_train(a.target, str(a.tokenizer), a.out, time_cap=a.time_cap, steps=a.steps,
               seed=a.seed)
    return 0


def _cmd_mtp_check(a) -> int:
    from .mtp import check_layout
    problems = check_layout(a.model_dir)
    for p in problems:
        print(f"layout: {p}", file=sys.stderr)
    if problems:
        return 1
    from .mtp_train import check
    lo, _, hi = a.residues.partition("-")
    res = check(a.model_dir, k=a.k, residues=range(int(lo), int(hi or lo) + 1), device=a.device)
    print(json.dumps(res, indent=2))
    return 0


def _seed_list(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seeds like 0,1,2, got {text!r}") from None
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative seeds like 0,1,2, got {text!r}")
    return seeds


def _seeds_arg(s) -> None:
    s.add_argument("--harness-seeds", type=_seed_list, default=(0,), metavar="0,1,...",
                   help="document seeds (sweep --seed) whose 128 harness plans at context "
                        "1,200 are checked; the first is the target (default 0)")


def _add_train(sub) -> None:
    """The ``train`` verb: a variant on the GPU, saved in the served layout."""
    s = sub.add_parser("train", help="train a variant on the GPU and save the served layout")
    s.add_argument("--variant", choices=("hybrid", "dense"), required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    s.add_argument("--time-cap", type=float, default=330.0, help="training seconds (default 330)")
    s.add_argument("--target-em", type=float, default=0.98)
    s.add_argument("--extra-steps", type=int, default=100,
                   help="steps after the fresh check passes, for margin (default 100)")
    s.add_argument("--lr", type=float, default=1e-3)
    s.add_argument("--final-decay", action="store_true",
                   help="cosine-decay the lr to 0.1x over the time left once the last "
                        "curriculum stage is reached (not yet tried on the GPU)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--workers", type=int, default=6, help="data worker processes")
    s.add_argument("--n", type=int, default=512, help="fresh random prompts in the final check")
    s.add_argument("--init", default=None, metavar="DIR",
                   help="go on training this served checkpoint instead of starting from scratch")
    s.add_argument("--start-stage", type=int, default=0,
                   help="curriculum stage to start at (0..4; 4 = the last, with --init)")
    s.add_argument("--warmup", type=int, default=100, help="lr warm-up steps (default 100)")
    _seeds_arg(s)
    s.add_argument("--log-next-to-out", action="store_true",
                   help="also append the log to train_<variant>.log beside --out")
    s.set_defaults(fn=_cmd_train)


def _add_checks(sub) -> None:
    """``check``, ``mtp-train``, ``mtp-check`` and ``probe``."""
    s = sub.add_parser("check", help="exact match + margins of a saved checkpoint")
    s.add_argument("model_dir")
    s.add_argument("--n", type=int, default=256)
    s.add_argument("--seed", type=int, default=7)
    s.add_argument("--device", default=None)
    s.add_argument("--min-em", type=float, default=0.98)
    _seeds_arg(s)
    s.set_defaults(fn=_cmd_check)
    s = sub.add_parser("mtp-train", help="train the MTP head on the frozen hybrid (GPU)")
    s.add_argument("--target", required=True, help="served hybrid checkpoint")
    s.add_argument("--out", required=True, help="output checkpoint (target copy + head)")
    s.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    s.add_argument("--time-cap", type=float, default=150.0, help="training seconds (default 150)")
    s.add_argument("--steps", type=int, default=3, help="draft steps trained (default 3)")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(fn=_cmd_mtp_train)
    s = sub.add_parser("mtp-check", help="layout check + acceptance estimate of an MTP head")
    s.add_argument("model_dir")
    s.add_argument("--k", type=int, default=3)
    s.add_argument("--residues", default="0-127", help="A-B or one residue (default 0-127)")
    s.add_argument("--device", default="cpu")
    s.set_defaults(fn=_cmd_mtp_check)
    s = sub.add_parser("probe", help="serve with vLLM and send planned prompts (see probe.py)")
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(fn=lambda a: __import__("engine.tinymodel.probe", fromlist=["main"]).main(a.rest))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine.tinymodel", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("tokenizer", help="train + save the tokenizer (CPU)")
    s.add_argument("out_dir")
    s.set_defaults(fn=_cmd_tokenizer)
    _add_train(sub)
    _add_checks(sub)
    from .dflash_train import add_parser as add_dflash_parser  # the train-dflash verb
    add_dflash_parser(sub, DEFAULT_TOKENIZER, HERE / "weights" / "hybrid")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "probe" and not ({"-h", "--help"} & set(args[:1])):
        from .probe import main as probe_main  # its own argparse (see probe.py)
        return probe_main(args[1:])
    a = p.parse_args(args)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
