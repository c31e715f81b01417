"""Train the MTP head on the frozen tiny hybrid, and estimate what vLLM will accept.

The head learns the copy task one token further than the target: at position t it gets
the embedding of token t+1 and the target's hidden state h_t and predicts token t+2. Draft
steps 2..k run the same layer on its own previous output, exactly as vLLM's proposer
chains them (``mtp.staircase``), so all k steps are trained (``--steps``) and the loss is
the mean over steps. Only the head's parameters get gradients; the target runs under
``no_grad`` and supplies ``embed_tokens`` / ``lm_head`` as vLLM shares them.

Acceptance (``acceptance``): the target is exact on the harness's plans, so greedy
decoding emits the answer; a draft round at the last emitted token accepts the leading
drafts that equal the answer's next tokens. tok/step = emitted tokens / rounds = 1 +
accepted / drafts, the harness's ``tok_per_step`` from vLLM's spec-decode counters.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from . import data as D
from .mtp import build_head, init_from_target, load_head, save_into


def _target_pass(target, ids):
    """Target's post-norm hidden states and embeddings (no gradients)."""
    import torch
    with torch.no_grad():
        hid = target.model(input_ids=ids, use_cache=False).last_hidden_state
        emb = target.model.embed_tokens(ids)
    return hid, emb


def chain_outputs(head, target, ids, steps: int, target_out=None):
    """Head outputs for draft steps 1..``steps`` at every position p (chain start
    t = p - s + 1): list of [B, T-1, H] tensors; position p predicts token p + 2.
    ``target_out``: the target's (hidden, embeddings) for ``ids`` if already computed."""
    import torch
    hid, emb = target_out if target_out is not None else _target_pass(target, ids)
    emb_next, hidden = emb[:, 1:], hid[:, :-1]
    history: list = []
    outs = []
    for s in range(steps):
        o = head.step(emb_next, hidden, history, step_idx=s)
        outs.append(o)
        hidden = torch.cat([torch.zeros_like(o[:, :1]), o[:, :-1]], dim=1)  # to p + 1
    return outs


def chain_loss(head, target, ids, tmask, steps: int, target_out=None):
    import torch
    import torch.nn.functional as F
    outs = chain_outputs(head, target, ids, steps, target_out)
    labels = ids[:, 2:]
    valid = tmask[:, 2:]
    losses, accs = [], []
    for o in outs:
        sel = o[:, :-1][valid]
        logits = target.lm_head(sel).float()
        losses.append(F.cross_entropy(logits, labels[valid]))
        with torch.no_grad():
            accs.append((logits.argmax(-1) == labels[valid]).float().mean().item())
    return sum(losses) / len(losses), accs


def train_head(target_dir: str, tok_dir: str, *, time_cap: float, steps: int = 3,
               lr: float = 2e-3, seed: int = 0, workers: int = 6, log=print,
               tokens_per_batch: int = 65536, stage: int = len(D.STAGES) - 1,
               passes: int = 2):
    """``passes`` optimizer steps per batch: the data workers (the harness's planner on
    the CPU) are slower than one head step on the GPU, and the target pass is reused."""
    import torch
    from .layout import load_served
    from .train import Producer
    torch.manual_seed(seed)
    prod = Producer(tok_dir, tokens_per_batch, 256, workers, seed + 7)  # fork before CUDA
    prod.set_stage(stage)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    target = load_served(target_dir, device=dev,
                         dtype=torch.bfloat16 if dev == "cuda" else torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    tc = json.loads((Path(target_dir) / "config.json").read_text())["text_config"]
    head = build_head(tc).to(dev)
    full = [i for i, t in enumerate(tc["layer_types"]) if t == "full_attention"]
    init_from_target(head, {k: v.float() for k, v in target.state_dict().items()}, full[-1])
    opt = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    curve, t0, step = [], time.time(), 0
    try:
        while time.time() - t0 < time_cap:
            ids_np, tm_np = prod.get()
            ids = torch.from_numpy(ids_np).to(dev)
            tm = torch.from_numpy(tm_np).to(dev)
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=(dev == "cuda")):
                tout = _target_pass(target, ids)
            for _ in range(passes):
                for g in opt.param_groups:
                    g["lr"] = lr * min(1.0, (step + 1) / 50)
                with torch.autocast(dev, dtype=torch.bfloat16, enabled=(dev == "cuda")):
                    loss, accs = chain_loss(head, target, ids, tm, steps, tout)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
                opt.step()
                step += 1
            if step % 10 < passes or step == passes:
                rec = dict(step=step, t=round(time.time() - t0, 1), bs=int(ids.shape[0]),
                           T=int(ids.shape[1]), loss=round(loss.item(), 4),
                           acc_per_step=[round(a, 3) for a in accs])
                curve.append(rec)
                log(json.dumps(rec))
    finally:
        prod.close()
    info = dict(what="MTP head for engine/tinymodel/weights/hybrid (target frozen)",
                steps_trained=steps, optimizer_steps=step, seconds=round(time.time() - t0, 1),
                lr=lr, seed=seed, tokens_per_batch=tokens_per_batch, curriculum_stage=stage,
                passes_per_batch=passes, data_workers=workers,
                init_layer=f"target model.layers.{full[-1]} (full attention)", curve=curve)
    return head.eval(), target, info


def _plan_sequences(tok_dir: str, seeds=(0,), residues=range(128), context: int = 1200):
    """(token ids of prompt + answer + <|im_end|>, prompt length) for harness plans."""
    from engine.prompts import ChatTokenizer, plan
    ct = ChatTokenizer.from_dir(tok_dir)
    eos = ct.tokenizer.token_to_id("<|im_end|>")
    out = []
    for s in seeds:
        for p in plan(ct.count_many, list(residues), context=context, modulus=128, seed=s,
                      verify=True):
            out.append((ct.encode_text(ct.render(p.messages)) + ct.encode_text(p.expected)
                        + [eos], p.target_len))
    return out, ct


def simulate_rounds(correct: list[list[bool]], prompt_len: int, end: int, k: int):
    """Greedy spec-decode rounds over one answer. ``correct[s][p]``: draft step s+1 at
    position p predicts token p + 2 correctly. Returns (rounds, accepted)."""
    cur, rounds, accepted = prompt_len, 0, 0  # index of the last emitted token
    while cur < end - 1:
        a = 0
        while a < k and cur + a + 1 <= end - 1 and correct[a][cur + a - 1]:
            a += 1
        rounds += 1
        accepted += a
        cur += a + 1
    return rounds, accepted


def acceptance(head, target, tok_dir: str, *, k: int = 3, seeds=(0,), residues=range(128),
               batch: int = 16) -> dict:
    """Teacher-forced estimate of vLLM's acceptance on the harness's plans: per-plan
    tok/step (median, min), per-position acceptance, and the target's own exact match
    (the estimate assumes the target emits the answer)."""
    import statistics
    import torch
    seqs, ct = _plan_sequences(tok_dir, seeds, residues)
    pad = ct.tokenizer.token_to_id("<|endoftext|>")
    dev = next(head.parameters()).device
    per_plan, pos_hits, pos_tries, target_exact = [], [0] * k, [0] * k, 0
    for i in range(0, len(seqs), batch):
        chunk = seqs[i:i + batch]
        T = max(len(x) for x, _ in chunk)
        ids = torch.full((len(chunk), T), pad, dtype=torch.long)
        for j, (x, _) in enumerate(chunk):
            ids[j, :len(x)] = torch.tensor(x)
        ids = ids.to(dev)
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16,
                                             enabled=dev.type == "cuda"):
            outs = chain_outputs(head, target, ids, k)
            preds = [target.lm_head(o).argmax(-1).cpu() for o in outs]
            hid, _ = _target_pass(target, ids)
            tgt_pred = target.lm_head(hid).argmax(-1).cpu()
        ids_c = ids.cpu()
        for j, (x, plen) in enumerate(chunk):
            end = len(x)
            target_exact += bool((tgt_pred[j, plen - 1:end - 1] == ids_c[j, plen:end]).all())
            correct = [[bool(preds[s][j, p] == ids_c[j, p + 2]) if p + 2 < end else False
                        for p in range(T - 1)] for s in range(k)]
            rounds, acc = simulate_rounds(correct, plen, end, k)
            per_plan.append(1.0 + acc / rounds if rounds else None)
            for s in range(k):
                for t in range(plen - 1, end - 2 - s):  # chain start t, position t + s
                    pos_tries[s] += 1
                    pos_hits[s] += correct[s][t + s]
    vals = [v for v in per_plan if v is not None]
    return dict(k=k, plans=len(seqs), seeds=list(seeds),
                tok_per_step_median=round(statistics.median(vals), 3),
                tok_per_step_min=round(min(vals), 3),
                step_accuracy=[round(h / max(t, 1), 4) for h, t in zip(pos_hits, pos_tries)],
                target_exact=target_exact)


def main_train(target_dir: str, tok_dir: str, out_dir: str, *, time_cap: float, steps: int,
               seed: int, log=print) -> dict:
    """Train, estimate acceptance for k = 1 and 3, and write the head into ``out_dir`` (a
    copy of the target checkpoint)."""
    head, target, info = train_head(target_dir, tok_dir, time_cap=time_cap, steps=steps,
                                    seed=seed, log=log)
    head = head.to(dtype=__import__("torch").bfloat16)
    t = time.time()
    info["acceptance_bf16"] = {f"k{k}": acceptance(head, target, tok_dir, k=k) for k in (1, 3)}
    info["check_seconds"] = round(time.time() - t, 1)
    log(json.dumps({k: v for k, v in info.items() if k != "curve"}))
    save_into(out_dir, head, info)
    return info


def check(model_dir: str, *, k: int = 3, residues=range(128), device: str = "cpu") -> dict:
    """Acceptance estimate of a committed head (CPU in CI: pass a few residues)."""
    import torch
    from .layout import load_served
    target = load_served(model_dir, device=device, dtype=torch.float32).eval()
    head = load_head(model_dir, device=device, dtype=torch.float32)
    return acceptance(head, target, model_dir, k=k, residues=residues)


__all__ = ["train_head", "acceptance", "simulate_rounds", "main_train", "check"]
