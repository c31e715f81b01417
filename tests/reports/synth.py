"""Synthetic phase records that follow docs/records.md exactly (every key, real types).

Used where a real lab sweep cannot produce the case cheaply (hostile answers, crashes,
boot failures, a hybrid model without a match unit). The shapes mirror the thread: a
794-char passage, residue k+1 = 4 collapsing to ``""`` with ``finish_reason=stop`` and
1.00 tok/step on the self-hit, cached_tokens in whole 128-token units.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

PASSAGE = ("The quick brown fox jumps over the lazy dog. " * 18)[:794]
RECORD_KEYS = (
    "run_id", "harness_version", "config_id", "config_label", "config", "requested_config",
    "config_mismatch", "engine", "engine_version", "patches", "patch_status", "model",
    "slot", "node", "isolation", "residue", "modulus", "target_len", "prompt_tokens",
    "templated_len", "phase", "cached_tokens", "computed_tail", "answer",
    "content_was_null", "sha1", "reference_sha1", "reference", "expected_chars",
    "verbatim_n", "verbatim_total", "repeats", "finish_reason", "completion_tokens",
    "tok_per_step", "latency_s", "verdict", "reason", "log_excerpt", "boot_s",
    "started_at", "rerun")


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def make_config(spec="mtp", ctx="huge", k=3, cudagraph="FULL_AND_PIECEWISE", block=128,
                unit=128, patches="none", prefix_caching=True, geometry=None) -> dict:
    return {
        "engine": "lab", "model": "lab-tiny-copy", "geometry": geometry, "spec": spec,
        "method": None if spec == "none" else ("dflash" if spec == "dflash2" else spec),
        "draft_tokens": k if spec != "none" else 0, "ctx": ctx, "cudagraph_mode": cudagraph,
        "prefix_caching": prefix_caching, "block_size": block, "prefix_match_unit": unit,
        "max_model_len": 245760, "kv_cache_memory_bytes": 5261334937, "patches": patches,
        "notes": ["SPEC=mtp: MTP head"], "overrides": [],
    }


def label(c: dict) -> str:
    parts = [f"SPEC={c['spec']}", f"CTX={c['ctx']}"]
    if c["method"]:
        parts.append(f"k={c['draft_tokens']}")
    parts.append(c["cudagraph_mode"])
    if c["prefix_caching"]:
        parts.append(f"block={c['block_size']} unit={c['prefix_match_unit'] or '-'}")
    else:
        parts.append("no-prefix-cache")
    parts.append(f"patches={c['patches']}")
    return " ".join(parts)


def config_id(c: dict) -> str:
    ident = {k: v for k, v in c.items() if k not in ("notes", "overrides")}
    return sha1(json.dumps(ident, sort_keys=True))[:12]


def record(config: dict, residue: int, phase: str, *, run_id="20261130-004512-ab12",
           answer: str | None = PASSAGE, verdict="ok", reason="matches the reference sha1",
           finish_reason="stop", tok_per_step=3.76, modulus=128, hit_unit=128,
           log_excerpt=None, cached_tokens="auto", repeats=None,
           started_at="2026-11-30T00:45:12+00:00", mismatch=(), requested=None,
           patch_status="auto", isolation="fresh") -> dict:
    base = 25024 - 25024 % modulus
    templated = base + residue
    text = "" if answer is None else answer
    if cached_tokens == "auto":
        cached_tokens = 0 if phase == "cold" else ((templated - 1) // hit_unit) * hit_unit
    n = 0
    while n < len(text) and text[: n + 1] in PASSAGE:
        n += 1
    booted = verdict not in ("boot-fail",)
    if patch_status == "auto":
        patch_status = {"prefill-discriminator": "off", "sliding-window-guard": "off"} \
            if config["patches"] == "none" else {"prefill-discriminator": "applied",
                                                   "sliding-window-guard": "applied"}
    r = {
        "run_id": run_id, "harness_version": "0.1.0+gc16d594",
        "config_id": config_id(config), "config_label": label(config), "config": config,
        "requested_config": requested or config, "config_mismatch": list(mismatch),
        "engine": "lab", "engine_version": "lab-0.1.0", "patches": config["patches"],
        "patch_status": patch_status if booted else None, "model": "lab-tiny-copy",
        "slot": "cpu0", "node": "ci-runner-1", "isolation": isolation, "residue": residue,
        "modulus": modulus, "target_len": templated,
        "prompt_tokens": templated if booted and verdict not in ("crash", "timeout") else None,
        "templated_len": templated, "phase": phase,
        "cached_tokens": cached_tokens if booted else None,
        "computed_tail": (templated - cached_tokens) if booted and cached_tokens is not None
        else None,
        "answer": text, "content_was_null": answer is None, "sha1": sha1(text),
        "reference_sha1": sha1(PASSAGE), "reference": "passage", "expected_chars": len(PASSAGE),
        "verbatim_n": n, "verbatim_total": len(text),
        "repeats": repeats if repeats is not None else (1 if len(text) >= 40 else 0),
        "finish_reason": finish_reason if booted else None,
        "completion_tokens": (len(text) // 4 if text else 1) if booted else None,
        "tok_per_step": tok_per_step if booted else None, "latency_s": 0.42,
        "verdict": verdict, "reason": reason, "log_excerpt": list(log_excerpt or []),
        "boot_s": 1.3, "started_at": started_at,
        "rerun": (f"sweep --spec {config['spec']} --ctx {config['ctx']} --residues {residue} "
                  f"--cudagraph {config['cudagraph_mode']} --patches {config['patches']}"),
    }
    assert tuple(r) == RECORD_KEYS
    return r


def collapse(config, residue, phase, **kw):
    """The thread's MTP collapse: empty answer, stop, 1.00 tok/step."""
    kw.setdefault("answer", "")
    kw.setdefault("tok_per_step", 1.0)
    return record(config, residue, phase, verdict="broken",
                  reason="empty answer, finish_reason=stop", **kw)


def sweep(config, residues, phases=("cold", "self-hit"), broken=(), broken_phase="self-hit",
          **kw) -> list[dict]:
    out = []
    for res in residues:
        for ph in phases:
            if res in broken and ph == broken_phase:
                out.append(collapse(config, res, ph, **kw))
            else:
                out.append(record(config, res, ph, **kw))
    return out


def write_jsonl(path: Path, records) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    return path


def manifest_for(records, *, command="sweep --spec mtp --ctx huge --residues all",
                 residues=None, interrupted=False) -> dict:
    configs, seen = [], set()
    for r in records:
        if r["config_id"] not in seen:
            seen.add(r["config_id"])
            configs.append({"config_id": r["config_id"], "config_label": r["config_label"],
                            "config": r["config"]})
    res = residues if residues is not None else sorted({r["residue"] for r in records})
    return {
        "run_id": records[0]["run_id"], "command": command,
        "harness_version": records[0]["harness_version"], "git_sha": "c16d594",
        "engine": "lab", "host": "ci-runner-1", "started_at": "2026-11-30T00:45:12+00:00",
        "ended_at": None if interrupted else "2026-11-30T00:52:40+00:00", "configs": configs,
        "residues": res, "modulus": 128, "phases": ["cold", "self-hit"], "isolation": "fresh",
        "reference": "passage", "context": "huge",
        "sampled": None if len(res) == 128 else f"residues {res}",
        "interrupted": interrupted, "exit_code": None if interrupted else 1,
    }
