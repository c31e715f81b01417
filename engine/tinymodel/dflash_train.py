"""Train the DFlash drafter (dflash_model.py) against the FROZEN tiny hybrid, on the
target's own copy task (data.py, the final curriculum stage), and estimate its
acceptance teacher-forced on held-out prompts.

Training example = one query block: for an answer position ``a`` (the bonus token vLLM
feeds first), the drafter sees the target's features at positions < a (context KV) and
``[ids[a], mask x k]``; slot j is trained to propose ``ids[a+j]`` (cross-entropy through
the target's frozen lm_head, slot weights ``exp(-(j-1)/decay)``). Many blocks per
sequence are trained at once with a block mask (``dflash_model.block_mask``).

Acceptance estimate (``acceptance``): under greedy decoding the target reproduces the
answer (it is exact on these prompt families), so the step starting at bonus position
``a`` accepts the longest prefix of drafts equal to ``ids[a+1..]``. Walking the answer
the way vLLM's steps do (start at the first generated token, jump by accepted + 1) gives
vLLM's "mean acceptance length" = 1 + accepted / drafting steps (tokens per step).
"""
from __future__ import annotations

import hashlib
import json
import math
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np

from . import data as D
from .dflash_kv_groups import DEFAULT_NUM_LAYERS

__all__ = ["acceptance", "add_parser", "answer_span", "make_blocks", "train_dflash"]


# ----------------------------------------------------------------------------- blocks
def answer_span(tmask_row) -> tuple[int, int]:
    """(first answer position = prompt length, sequence length) from a loss-mask row."""
    idx = np.flatnonzero(tmask_row)
    return int(idx[0]), int(idx[-1]) + 1


def make_blocks(ids: np.ndarray, tmask: np.ndarray, k: int, mask_id: int, *,
                max_blocks: int | None, rng: random.Random | None):
    """Query blocks for every sequence: anchors ``a`` in [prompt_len, len-2] (all of them,
    or ``max_blocks`` drawn at random), block ids ``[ids[a], mask x k]``, labels
    ``ids[a+1..a+k]`` with a flag for labels inside the sequence."""
    spans = [answer_span(r) for r in tmask]
    per = []
    for plen, n in spans:
        a = list(range(plen, n - 1))
        if max_blocks is not None and len(a) > max_blocks:
            a = sorted(rng.sample(a, max_blocks))
        per.append(a)
    B, NB = len(per), max(1, max(len(a) for a in per))
    anchors = np.zeros((B, NB), np.int64)
    valid = np.zeros((B, NB), bool)
    block_ids = np.full((B, NB, k + 1), mask_id, np.int64)
    labels = np.zeros((B, NB, k), np.int64)
    label_ok = np.zeros((B, NB, k), bool)
    for i, (a_list, (_, n)) in enumerate(zip(per, spans)):
        for b, a in enumerate(a_list):
            anchors[i, b], valid[i, b] = a, True
            block_ids[i, b, 0] = ids[i, a]
            m = min(k, n - 1 - a)
            labels[i, b, :m] = ids[i, a + 1:a + 1 + m]
            label_ok[i, b, :m] = True
    return dict(anchors=anchors, valid=valid, block_ids=block_ids, labels=labels,
                label_ok=label_ok, spans=spans)


def acceptance(accepted: np.ndarray, anchors: np.ndarray, valid: np.ndarray,
               spans) -> tuple[int, int]:
    """(drafted tokens accepted, drafting steps) over the given sequences when decoding
    walks each answer as vLLM does: the first token comes from the prefill; a step at
    bonus position ``a`` accepts ``accepted[a]`` drafts and yields one more token."""
    total_acc = steps = 0
    for i, (plen, n) in enumerate(spans):
        acc_at = {int(a): int(m) for a, m, ok in zip(anchors[i], accepted[i], valid[i]) if ok}
        a = plen
        while a < n - 1:  # the last token (eos) ends generation
            m = min(acc_at.get(a, 0), n - 1 - a)
            total_acc += m
            steps += 1
            a += m + 1
    return total_acc, steps


# ----------------------------------------------------------------------------- torch parts
def target_features(target, ids, layer_ids):
    """[B, T, n*H]: the residual stream after each target layer in ``layer_ids`` (vLLM's
    aux hidden state ``i + 1``), concatenated in layer order, via forward hooks."""
    import torch
    got = {}
    hooks = [target.model.layers[i].register_forward_hook(
        lambda _m, _inp, out, i=i: got.__setitem__(i, out[0] if isinstance(out, tuple) else out))
        for i in layer_ids]
    try:
        with torch.no_grad():
            target.model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return torch.cat([got[i] for i in sorted(layer_ids)], dim=-1)


def block_logits(drafter, target, aux, blocks: dict, dev):
    """Drafter logits [B, NB, k, V] for the mask slots (target's frozen embed + lm_head)."""
    import torch
    t = {n: torch.from_numpy(blocks[n]).to(dev) for n in ("anchors", "valid", "block_ids")}
    with torch.no_grad():
        emb = target.model.embed_tokens(t["block_ids"])
    wdt = drafter.fc.weight.dtype  # bf16 target, fp32 drafter while training
    hidden = drafter(aux.to(wdt), emb.to(wdt), t["anchors"], t["valid"])
    return target.lm_head(hidden[:, :, 1:].to(target.lm_head.weight.dtype))


def slot_stats(logits, labels, label_ok, valid):
    """Per-block accepted count (leading argmax matches) and per-slot hit rates."""
    import torch
    hit = (logits.argmax(-1) == labels) & label_ok
    accepted = torch.cumprod(hit.long(), dim=-1).sum(-1) * valid.long()
    rows = valid[:, :, None] & label_ok
    rate = (hit.float() * rows).sum((0, 1)) / rows.float().sum((0, 1)).clamp(min=1)
    return accepted, rate


def weighted_loss(logits, labels, label_ok, decay: float):
    import torch
    import torch.nn.functional as F
    k = labels.shape[-1]
    w = torch.exp(-torch.arange(k, device=logits.device, dtype=torch.float32) / decay)
    w = w.expand_as(labels) * label_ok
    ce = F.cross_entropy(logits.float().flatten(0, 2), labels.flatten(), reduction="none")
    return (ce * w.flatten()).sum() / w.sum().clamp(min=1)


def evaluate_acceptance(drafter, target, tok_dir: str, *, k: int, mask_id: int,
                        layer_ids, n: int = 128, seed: int = 4242, harness_seeds=(0,),
                        batch: int = 16) -> dict:
    """Held-out acceptance: random last-stage conversations from unseen document seeds,
    and the harness's own plans (context 1,200, all 128 residues) per ``harness_seeds``."""
    import torch
    from .train import _eval_batches
    sets, ct = _eval_batches(tok_dir, n, seed, tuple(harness_seeds))
    pad = ct.tokenizer.token_to_id("<|endoftext|>")
    dev = next(drafter.parameters()).device
    out = {}
    drafter.eval()
    for name, enc in sets.items():
        acc_sum = steps = n_blocks = blocks_acc = 0
        rate_sum = torch.zeros(k)
        for i in range(0, len(enc), batch):
            chunk = enc[i:i + batch]
            T = max(len(x) for x, _ in chunk)
            ids = np.full((len(chunk), T), pad, np.int64)
            tm = np.zeros((len(chunk), T), bool)
            for j, (x, plen) in enumerate(chunk):
                ids[j, :len(x)] = x
                tm[j, plen:len(x)] = True
            blocks = make_blocks(ids, tm, k, mask_id, max_blocks=None, rng=None)
            with torch.no_grad(), _autocast(dev):
                aux = target_features(target, torch.from_numpy(ids).to(dev), layer_ids)
                logits = block_logits(drafter, target, aux, blocks, dev)
                lab = {n_: torch.from_numpy(blocks[n_]).to(dev) for n_ in ("labels", "label_ok", "valid")}
                accepted, rate = slot_stats(logits, lab["labels"], lab["label_ok"], lab["valid"])
            acc_np = accepted.cpu().numpy()
            a, s = acceptance(acc_np, blocks["anchors"], blocks["valid"], blocks["spans"])
            acc_sum, steps = acc_sum + a, steps + s
            n_blocks += int(blocks["valid"].sum())
            blocks_acc += int(acc_np.sum())
            rate_sum += rate.float().cpu() * int(blocks["valid"].sum())
        out[name] = dict(
            n=len(enc), blocks=n_blocks,
            acceptance_length=round(1 + acc_sum / max(steps, 1), 3),
            mean_accepted_per_block=round(blocks_acc / max(n_blocks, 1), 3),
            slot_hit_rate=[round(x, 3) for x in (rate_sum / max(n_blocks, 1)).tolist()])
    drafter.train()
    return out


def _autocast(dev):
    import torch
    return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=(dev.type == "cuda"))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------- training
def train_dflash(target_dir: str, tok_dir: str, out_dir: str, *, time_cap: float = 170.0,
                 max_steps: int | None = None, num_layers: int = DEFAULT_NUM_LAYERS,
                 target_layer_ids=(0, 1, 2, 3, 4, 5), k: int = 7, blocks_per_seq: int = 64,
                 lr: float = 1e-3, warmup: int = 30, decay: float = 4.0, seed: int = 0,
                 workers: int = 6, stage: int = len(D.STAGES) - 1,
                 tokens_per_batch: int = 65536, max_bs: int = 256, eval_n: int = 128,
                 harness_seeds=(0,), init_dir: str | None = None, log=print) -> dict:
    """Train for ``time_cap`` seconds (or ``max_steps``), evaluate held-out acceptance
    with the bf16 weights, save the vLLM layout to ``out_dir``; returns training.json.
    ``init_dir``: go on training a saved drafter (its config wins over ``num_layers`` /
    ``target_layer_ids``; AdamW starts afresh, hence the warm-up)."""
    import torch
    from .dflash_model import save_drafter
    from .layout import load_served, variant_of
    from .train import Producer
    if variant_of(target_dir) != "hybrid":
        raise ValueError(f"{target_dir} is not the hybrid target")
    _check_kv_group(target_dir, init_dir, num_layers)  # before forking the data workers
    t_start = time.time()
    torch.manual_seed(seed)
    rng = random.Random(seed)
    prod = Producer(tok_dir, tokens_per_batch, max_bs, workers, seed + 77)  # fork before CUDA
    prod.set_stage(stage)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    target = load_served(target_dir, device=dev.type, dtype=torch.bfloat16).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    drafter, cfg = _drafter(target, init_dir, num_layers, target_layer_ids, k, dev)
    num_layers = cfg["num_hidden_layers"]
    layer_ids = cfg["dflash_config"]["target_layer_ids"]
    mask_id = cfg["dflash_config"]["mask_token_id"]
    nparams = sum(p.numel() for p in drafter.parameters())
    opt = torch.optim.AdamW(drafter.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    t0 = time.time()
    curve, step = _train_loop(prod, drafter, target, opt, rng=rng, k=k, mask_id=mask_id,
                              layer_ids=layer_ids, time_cap=time_cap, max_steps=max_steps,
                              blocks_per_seq=blocks_per_seq, lr=lr, warmup=warmup,
                              decay=decay, dev=dev, log=log)
    train_s = time.time() - t0
    drafter = drafter.to(torch.bfloat16)  # what is served
    t_eval = time.time()
    held_out = evaluate_acceptance(drafter, target, tok_dir, k=k, mask_id=mask_id,
                                   layer_ids=layer_ids, n=eval_n, harness_seeds=harness_seeds)
    log(json.dumps({"held_out_acceptance": held_out}))
    info = dict(
        kind="dflash_drafter", target=str(target_dir),
        target_sha256=_sha256(Path(target_dir) / "model.safetensors"),
        argv=sys.argv, init_from=init_dir, params=nparams, steps=step, train_seconds=round(train_s, 1),
        eval_seconds=round(time.time() - t_eval, 1), num_speculative_tokens=k,
        num_layers=num_layers, target_layer_ids=layer_ids, mask_token_id=mask_id,
        blocks_per_seq=blocks_per_seq, lr=lr, warmup=warmup, slot_loss_decay=decay,
        seed=seed, stage=stage, max_prompt_tokens=D.STAGES[stage][0],
        tokens_per_batch=tokens_per_batch, held_out_acceptance=held_out,
        device=(torch.cuda.get_device_name(0) if dev.type == "cuda" else platform.processor() or "cpu"),
        torch=torch.__version__, curve=curve)
    save_drafter(drafter, out_dir, extra=None)
    info["wall_seconds"] = round(time.time() - t_start, 1)
    (Path(out_dir) / "training.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def _train_loop(prod, drafter, target, opt, *, rng, k: int, mask_id: int, layer_ids,
                time_cap: float, max_steps: int | None, blocks_per_seq: int, lr: float,
                warmup: int, decay: float, dev, log) -> tuple[list[dict], int]:
    """Steps until ``time_cap`` (or ``max_steps``), the lr warmed up then cosine-decayed to
    0.1x: (the curve logged every 10 steps, the steps run). Closes ``prod``."""
    import torch
    curve, step, t0 = [], 0, time.time()
    try:
        while (max_steps is None or step < max_steps) and time.time() - t0 < time_cap:
            ids_np, tm_np = prod.get()
            blocks = make_blocks(ids_np, tm_np, k, mask_id, max_blocks=blocks_per_seq, rng=rng)
            frac = min(1.0, (time.time() - t0) / time_cap) if max_steps is None \
                else step / max(max_steps, 1)
            factor = min(1.0, (step + 1) / max(warmup, 1)) * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
            for g in opt.param_groups:
                g["lr"] = lr * factor
            lab = {n: torch.from_numpy(blocks[n]).to(dev) for n in ("labels", "label_ok", "valid")}
            logits, loss, gn = _update(drafter, target, opt, ids_np, blocks, lab, layer_ids,
                                       decay, dev)
            step += 1
            if step % 10 == 0 or step == 1:
                rec = dict(step=step, t=round(time.time() - t0, 1), loss=round(loss.item(), 4),
                           gnorm=round(gn.item(), 3), bs=int(ids_np.shape[0]),
                           T=int(ids_np.shape[1]), **_batch_acceptance(logits, lab, blocks))
                curve.append(rec)
                log(json.dumps(rec))
    finally:
        prod.close()
    return curve, step


def _update(drafter, target, opt, ids_np, blocks: dict, lab: dict, layer_ids, decay: float,
            dev):
    """One optimizer step on a batch of blocks: (logits, loss, grad norm)."""
    import torch
    with _autocast(dev):
        aux = target_features(target, torch.from_numpy(ids_np).to(dev), layer_ids)
        logits = block_logits(drafter, target, aux, blocks, dev)
        loss = weighted_loss(logits, lab["labels"], lab["label_ok"], decay)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
    opt.step()
    return logits, loss, gn


def _drafter(target, init_dir: str | None, num_layers: int, target_layer_ids, k: int, dev):
    """The drafter to train and its config: ``init_dir``'s (its config wins), else a new one
    of ``num_layers`` reading ``target_layer_ids``, its final norm at the target's scale."""
    import torch
    from .dflash_model import DFlashDrafter, drafter_config, load_drafter
    if init_dir:
        drafter = load_drafter(init_dir, device=dev.type, dtype=torch.float32)
        return drafter, drafter.cfg
    cfg = drafter_config(num_layers=num_layers, target_layer_ids=target_layer_ids,
                         block_size=k + 1)
    drafter = DFlashDrafter(cfg).to(dev)
    with torch.no_grad():  # start at the target's final-norm scale (Gemma-style 1 + w)
        drafter.norm.weight.copy_(1.0 + target.model.norm.weight.float())
    return drafter, cfg


def _batch_acceptance(logits, lab: dict, blocks: dict) -> dict:
    """The logged step's acceptance on its own batch: fresh samples, measured before the
    update; sampled anchors, so the walk only approximates a full answer's."""
    import torch
    with torch.no_grad():
        accepted, rate = slot_stats(logits, lab["labels"], lab["label_ok"], lab["valid"])
    a, s = acceptance(accepted.cpu().numpy(), blocks["anchors"], blocks["valid"],
                      blocks["spans"])
    return dict(batch_acceptance_length=round(1 + a / max(s, 1), 3),
                slot_hit_rate=[round(x, 3) for x in rate.tolist()])


def _check_kv_group(target_dir: str, init_dir: str | None, num_layers: int) -> None:
    """ValueError when vLLM would split the drafter over KV-cache groups next to this
    target (it then refuses to serve it); ``init_dir``'s own layer count wins."""
    from .dflash_kv_groups import draft_layers_problem, target_layer_types
    if init_dir:
        num_layers = json.loads((Path(init_dir) / "config.json").read_text()).get(
            "num_hidden_layers")
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"{init_dir}/config.json has no num_hidden_layers >= 1")
    layer_types = target_layer_types(target_dir)
    if layer_types is None:
        raise ValueError(f"{target_dir}/config.json has no text_config.layer_types")
    problem = draft_layers_problem(layer_types, num_layers)
    if problem:
        raise ValueError(problem)


# ----------------------------------------------------------------------------- CLI
def _int_list(text: str) -> tuple[int, ...]:
    import argparse
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 0,1,2, got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError(f"expected integers like 0,1,2, got {text!r}")
    return vals


def add_parser(sub, default_tokenizer: Path, default_target: Path) -> None:
    """The ``train-dflash`` verb of ``python -m engine.tinymodel``."""
    s = sub.add_parser(
        "train-dflash", help="train the DFlash drafter against the frozen hybrid (GPU, ~4 min)",
        description="Train a DFlash drafter (method dflash in vLLM 0.26.0) against the "
                    "frozen tiny hybrid on its copy task; write config.json "
                    "(DFlashDraftModel + dflash_config), model.safetensors and training.json "
                    "to --out. One H200: --time-cap training seconds + ~30 s for loading, "
                    "the held-out acceptance check and saving.")
    s.add_argument("--target", type=Path, default=default_target, help="served hybrid checkpoint")
    s.add_argument("--out", required=True, type=Path)
    s.add_argument("--tokenizer", type=Path, default=default_tokenizer)
    s.add_argument("--time-cap", type=float, default=170.0, help="training seconds (default 170)")
    s.add_argument("--max-steps", type=int, default=None, help="stop after this many steps")
    s.add_argument("--layers", type=int, default=DEFAULT_NUM_LAYERS,
                   help=f"drafter layers (default {DEFAULT_NUM_LAYERS}; a count vLLM would "
                        "split over KV-cache groups next to --target is refused)")
    s.add_argument("--target-layer-ids", type=_int_list, default=(0, 1, 2, 3, 4, 5),
                   metavar="0,1,...", help="target layers whose outputs feed fc (default all 6)")
    s.add_argument("--k", type=int, default=7, help="proposals per step (default 7)")
    s.add_argument("--blocks-per-seq", type=int, default=64,
                   help="query blocks drawn per sequence (default 64: most answers have fewer, so all)")
    s.add_argument("--lr", type=float, default=1e-3)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--workers", type=int, default=8, help="data worker processes (default 8)")
    s.add_argument("--stage", type=int, default=len(D.STAGES) - 1,
                   help=f"data.STAGES index for prompt length (default {len(D.STAGES) - 1}, the last)")
    s.add_argument("--tokens-per-batch", type=int, default=65536)
    s.add_argument("--eval-n", type=int, default=128, help="held-out random prompts")
    s.add_argument("--harness-seeds", type=_int_list, default=(0,), metavar="0,1,...",
                   help="document seeds of the harness plans checked (128 residues each)")
    s.add_argument("--no-harness-eval", action="store_true", help="skip the harness plans")
    s.add_argument("--init", type=Path, default=None, metavar="DIR",
                   help="go on training this saved drafter (a second short run)")
    s.set_defaults(fn=_cmd)


def _cmd(a) -> int:
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not (a.target / "model.safetensors").is_file():
        print(f"error: no model.safetensors in --target {a.target}", file=sys.stderr)
        return 2
    if a.init is not None and not (a.init / "config.json").is_file():
        print(f"error: no config.json in --init {a.init}", file=sys.stderr)
        return 2
    if not 0 <= a.stage < len(D.STAGES) or a.k < 1 or a.layers < 1:
        print("error: --stage must be 0..4, --k and --layers >= 1", file=sys.stderr)
        return 2
    try:
        info = train_dflash(str(a.target), str(a.tokenizer), str(a.out), time_cap=a.time_cap,
                            max_steps=a.max_steps, num_layers=a.layers,
                            target_layer_ids=a.target_layer_ids, k=a.k,
                            blocks_per_seq=a.blocks_per_seq, lr=a.lr, seed=a.seed,
                            workers=a.workers, stage=a.stage,
                            tokens_per_batch=a.tokens_per_batch, eval_n=a.eval_n,
                            harness_seeds=() if a.no_harness_eval else a.harness_seeds,
                            init_dir=str(a.init) if a.init else None)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in info.items() if k != "curve"}))
    return 0
