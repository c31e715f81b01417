"""Boot, measured then cut: the tiny hybrid booted N times with each cut on and off.

Variants (``--variants``, default ``plain,caches,preimport,both``):

- ``plain``: ``python -m vllm.entrypoints.openai.api_server`` with empty compile / Triton /
  Inductor caches of its own (what a server pays on a cold cache: a new machine);
- ``caches``: the same command with the caches shared under ``--cache-dir`` (warmed by one
  uncounted boot first, kept between runs). This is also what a plain boot costs today on
  a warm machine, whose default ``~/.cache`` is warm: ``ratio_to_warm_plain`` compares
  against it;
- ``preimport``: forked from a parent that imported torch and vLLM once
  (:mod:`engine.vllm.prefork`), engine core by fork, empty caches of its own;
- ``both``: forked and shared caches;
- ``forkcore`` (optional): the plain command with shared caches and
  ``VLLM_WORKER_MULTIPROC_METHOD=fork``, to tell the engine core's fork from the parent's
  imports.

Rounds interleave the variants (round 1: each variant once, round 2: ...), so drift hits
all alike. Every boot gets the same cells, cold, in order (default residues 4,3,5 of the
harness's plan at context 1,200: residue 4 first, the cell only a fresh server breaks on
FULL_AND_PIECEWISE unpatched). Printed: the command lines, one table (median boot and each
stage, ratio to plain, compile cache hits, answers byte-identical to the plain boot), and
``OUT/gpu_boot.json`` with every boot, its log split and its answers.

    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/gpu_boot.py --out /tmp/boot --rounds 2
    python benchmarks/gpu_boot.py --dry-run --out /tmp/boot       # prints, starts nothing
    python benchmarks/gpu_boot.py --engine lab --out /tmp/b         # the mechanism on CPU
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shlex
import shutil
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.presets import resolve  # noqa: E402
from engine.prefork import ForkServer, ForkServerUnavailable, start_child  # noqa: E402
from engine.vllm.bootlog import parse_boot_log  # noqa: E402
from engine.vllm.caches import cache_env, cache_use, snapshot  # noqa: E402
from engine.vllm.launch import build_launch, write_plugin_dist_info  # noqa: E402
from engine.vllm.prefork import (VLLM_ENTRY, VLLM_PRELOAD, VLLM_PRELOAD_OPTIONAL,  # noqa: E402
                                 child_argv, forked_env)

VARIANTS = {  # name: (shared caches, forked from the pre-imported parent, extra env)
    "plain": (False, False, {}),
    "caches": (True, False, {}),
    "preimport": (False, True, {}),
    "both": (True, True, {}),
    "forkcore": (True, False, {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}),
}
LAB_PRELOAD = ("engine.lab.cli", "engine.lab.serve", "engine.lab.server")
# The device environment that worked (docs/gpu-notes.md, /work/shared/gpu/README.md).
DEVICE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
              "VLLM_USE_FLASHINFER_SAMPLER": "0", "PYTHONUNBUFFERED": "1"}
# The matrix's hybrid configuration (reports/h200/device/dry_run.txt).
KV_BYTES = 5261334937
STAGES = ("python_start_and_imports_s", "api_server_to_engine_core_s", "engine_core_to_weights_s",
          "compile_s", "graph_capture_s", "weights_to_ready_s", "first_request_extra_s")


class UserError(Exception):
    """A bad argument: one line on stderr, exit 2."""


@dataclass
class Options:
    engine: str
    model: str
    out: Path
    cache_dir: Path
    rounds: int
    variants: list[str]
    residues: list[int]
    context: int
    max_tokens: int
    python: str
    gpu: str | None
    budget_s: float
    boot_timeout: float
    dry_run: bool
    engine_core: str = "fork"
    extra: dict[str, Any] = field(default_factory=dict)


def parse_args(argv: list[str] | None) -> Options:
    ap = argparse.ArgumentParser(prog="benchmarks/gpu_boot.py", description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("vllm", "lab"), default="vllm")
    ap.add_argument("--model", default=str(ROOT / "engine/tinymodel/weights/hybrid"))
    ap.add_argument("--out", required=True, help="output folder (logs, JSON)")
    ap.add_argument("--cache-dir", default="/tmp/residue-lab-boot-cache",
                    help="shared cache folder, kept between runs; boots with caches off get "
                         "empty ones beside it (CACHE_DIR-own/), removed after each boot")
    ap.add_argument("--rounds", type=int, default=3, help="boots per variant, at most")
    ap.add_argument("--variants", default="plain,caches,preimport,both")
    ap.add_argument("--residues", default="4,3,5", help="cold cells, sent in this order")
    ap.add_argument("--context", type=int, default=1200)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--python", default=sys.executable, help="interpreter of the servers")
    ap.add_argument("--gpu", default="0", help="CUDA_VISIBLE_DEVICES (vllm)")
    ap.add_argument("--budget-s", type=float, default=540.0,
                    help="start no boot that the slowest boot so far would not finish in")
    ap.add_argument("--boot-timeout", type=float, default=300.0)
    ap.add_argument("--engine-core", choices=("fork", "spawn"), default="fork",
                    help="engine core start method of forked vLLM servers")
    ap.add_argument("--dry-run", action="store_true", help="print what would run; start nothing")
    a = ap.parse_args(argv)
    variants = [v for v in a.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise UserError(f"--variants: unknown {', '.join(bad) or '(none)'}; "
                        f"allowed: {', '.join(VARIANTS)}")
    try:
        residues = [int(r) for r in a.residues.split(",") if r]
    except ValueError:
        raise UserError(f"--residues: expected a comma list of integers, got {a.residues!r}")
    if not residues or any(not 0 <= r < 128 for r in residues):
        raise UserError("--residues: each must be in 0..127")
    if a.rounds < 1:
        raise UserError("--rounds must be at least 1")
    if not Path(a.model).is_dir() and a.engine == "vllm":
        raise UserError(f"--model {a.model}: no such directory")
    out = Path(a.out)
    return Options(engine=a.engine, model=a.model, out=out,
                   cache_dir=Path(a.cache_dir).expanduser().resolve(),
                   rounds=a.rounds, variants=variants, residues=residues, context=a.context,
                   max_tokens=a.max_tokens, python=a.python, gpu=a.gpu if a.engine == "vllm" else None,
                   budget_s=a.budget_s, boot_timeout=a.boot_timeout, dry_run=a.dry_run,
                   engine_core=a.engine_core)


# -- commands ----------------------------------------------------------------------------
def server_command(opts: Options, port: int) -> tuple[list[str], dict[str, str]]:
    """The plain command and the env it adds, for one port (no cache variables)."""
    if opts.engine == "lab":
        argv = [opts.python, "-m", "engine.lab", "--port", str(port), "--enable-prefix-caching",
                "--block-size", "128", "--prefix-match-unit", "128",
                "--speculative-config", '{"method":"ngram","num_speculative_tokens":3}',
                "-cc", '{"cudagraph_mode":"FULL_AND_PIECEWISE"}', "--patches", "none",
                "--max-model-len", "245760", "--enable-prompt-tokens-details"]
        return argv, {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cfg = resolve("ngram", "huge", engine="vllm", model=opts.model, patches="none",
                  geometry="hybrid", draft_tokens=3, cudagraph_mode="FULL_AND_PIECEWISE",
                  prefix_caching=True, block_size=128, prefix_match_unit=128,
                  max_model_len=245760, kv_cache_memory_bytes=KV_BYTES)
    plugin = opts.out / ".vllm-plugin"
    if not opts.dry_run:
        write_plugin_dist_info(plugin)
    spec = build_launch(cfg, port=port, model=opts.model, gpu=opts.gpu, python=opts.python,
                        extra_args=["--gpu-memory-utilization", "0.08"], plugin_path=plugin,
                        base_env=DEVICE_ENV)
    return spec.argv, spec.env


def cache_root(opts: Options, variant: str, boot: str) -> Path:
    """The shared folder, or an empty one of this boot's own beside it (never under OUT:
    compile caches are tens of MB and OUT travels back from the device)."""
    if VARIANTS[variant][0]:
        return opts.cache_dir
    return opts.cache_dir.with_name(opts.cache_dir.name + "-own") / boot


def variant_env(opts: Options, variant: str, base: dict[str, str], boot: str) -> dict[str, str]:
    caches = cache_env(cache_root(opts, variant, boot), create=not opts.dry_run)
    return {**base, **caches, **VARIANTS[variant][2]}


def shell(argv: list[str], env: dict[str, str]) -> str:
    pre = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return (pre + " " if pre else "") + " ".join(shlex.quote(a) for a in argv)


def preload_lists(opts: Options) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return (LAB_PRELOAD, ()) if opts.engine == "lab" else (VLLM_PRELOAD, VLLM_PRELOAD_OPTIONAL)


def entry(opts: Options) -> str:
    return "-m engine.lab" if opts.engine == "lab" else VLLM_ENTRY


def child_env(opts: Options, env: dict[str, str]) -> dict[str, str]:
    return env if opts.engine == "lab" else forked_env(env, opts.engine_core)


# -- one boot ----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(port: int, child, timeout: float) -> float | None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            return None
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return time.time()
        except httpx.HTTPError:
            pass
        time.sleep(0.1)      # polling the readiness condition itself, bounded above
    return None


def model_id(port: int) -> str:
    import httpx

    data = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
    return data["data"][0]["id"]


def plan_cells(opts: Options, port: int, model: str) -> list:
    """The harness's prompt plan for the residues, counted by this server's /tokenize."""
    import httpx

    from engine.prompts.planner import plan

    def count_many(convs):
        return [int(httpx.post(f"http://127.0.0.1:{port}/tokenize", timeout=60, json={
            "model": model, "messages": list(c), "add_generation_prompt": True}).json()["count"])
            for c in convs]

    return plan(count_many, opts.residues, context=opts.context, modulus=128, verify=True,
                max_len=245760)


def send_cells(port: int, model: str, plans: list, max_tokens: int) -> list[dict]:
    """Each cell once, cold, in order, through the harness's client."""
    from harness.serve.client import EngineClient

    async def run() -> list[dict]:
        out = []
        async with EngineClient(f"http://127.0.0.1:{port}", timeout=120) as client:
            for p in plans:
                r = await client.chat(list(p.messages), model=model, max_tokens=max_tokens)
                out.append({"residue": p.residue, "target_len": p.target_len,
                            "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens,
                            "answer": r.answer, "sha1": hashlib.sha1(r.answer.encode()).hexdigest(),
                            "finish_reason": r.finish_reason, "latency_s": round(r.latency_s, 3),
                            "matches_passage": r.answer.strip() == p.expected.strip()})
        return out

    return asyncio.run(run())


def boot_once(opts: Options, variant: str, rnd: int, server: ForkServer | None,
              plans: list | None) -> tuple[dict, list | None]:
    port = free_port()
    name = f"{variant}-r{rnd}"
    argv, add = server_command(opts, port)
    env = variant_env(opts, variant, {**os.environ, **add}, name)
    root = cache_root(opts, variant, name)
    before = snapshot(root)
    log = opts.out / "logs" / f"{name}.log"
    forked = VARIANTS[variant][1]
    if forked:
        args = argv[3:] if opts.engine == "lab" else child_argv(argv)
        child = start_child(argv, env=env, log_path=log, cwd=ROOT, server=server,
                            entry=entry(opts), child_argv=args, child_env=child_env(opts, env),
                            fallback_reason=None if server else "fork server unavailable")
    else:
        child = start_child(argv, env=env, log_path=log, cwd=ROOT)
    rec: dict[str, Any] = {"variant": variant, "round": rnd, "port": port, "how": child.how,
                           "fallback_reason": child.fallback_reason, "log": str(log),
                           "env_differs_from_parent_imports": list(child.env_differs)}
    try:
        health = wait_health(port, child, opts.boot_timeout)
        rec["boot_s"] = round(health - child.started_at, 3) if health else None
        if health is None:
            rec["error"] = f"no /health 200 within {opts.boot_timeout} s (rc {child.poll()})"
            return rec, plans
        model = model_id(port)
        if plans is None:
            plans = plan_cells(opts, port, model)
        rec["cells"] = send_cells(port, model, plans, opts.max_tokens)
    except Exception as exc:     # recorded, the run goes on: one bad boot is a data point
        rec["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        rec["survivors"] = child.kill(grace=15)
    text = log.read_text(errors="replace")
    lat = [c["latency_s"] for c in rec.get("cells", [])]
    split = parse_boot_log(text, started_at=child.started_at, health_at=health, latencies=lat)
    rec["split"] = split.as_dict()
    rec["cache"] = cache_use(text, root=root, before=before, after=snapshot(root)).as_dict()
    if root != opts.cache_dir:
        shutil.rmtree(root, ignore_errors=True)     # empty by design, at every boot
    return rec, plans


# -- the run -----------------------------------------------------------------------------
def start_fork_server(opts: Options, env: dict[str, str]) -> tuple[ForkServer | None, dict]:
    preload, optional = preload_lists(opts)
    t0 = time.time()
    fs = ForkServer(preload, optional, log_path=opts.out / "logs" / "fork-server.log",
                    python=opts.python, env=child_env(opts, env), cwd=ROOT)
    try:
        fs.start()
    except ForkServerUnavailable as exc:
        return None, {"usable": False, "reason": str(exc), "wall_s": round(time.time() - t0, 3)}
    return fs, {"usable": True, "wall_s": round(time.time() - t0, 3), **fs.info}


def expected_boot_s(boots: list[dict], variant: str) -> float:
    """What the next boot of ``variant`` may take: its own slowest so far, else the slowest
    boot with the same cache setting (the warm-up shares the caches). On the H200 one boot
    on empty caches took 203 s and warm ones 44-48 s: budgeting every boot at the slowest
    of all stopped the run after one round's first variant (reports/h200, call 4)."""
    def slowest(bs):
        return max((b.get("boot_s") or 0.0) for b in bs) if bs else 0.0

    own = [b for b in boots if b["variant"] == variant and b.get("boot_s")]
    if own:
        return slowest(own)
    shared = VARIANTS[variant][0]
    alike = [b for b in boots if VARIANTS[b["variant"]][0] == shared and b.get("boot_s")]
    return slowest(alike) if alike else slowest(boots)


def run(opts: Options) -> dict:
    (opts.out / "logs").mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    argv0, add0 = server_command(opts, 1)   # only its env is used (port 0 is refused)
    shared_env = variant_env(opts, "both", {**os.environ, **add0}, "fork-server")
    server, fs_info = (None, {"usable": False, "reason": "no forked variant"})
    if any(VARIANTS[v][1] for v in opts.variants):
        server, fs_info = start_fork_server(opts, shared_env)
        print(f"# fork server: {json.dumps(fs_info)}", flush=True)
    boots, plans = [], None
    try:
        # One uncounted boot fills the shared caches (and plans the cells).
        warm, plans = boot_once(opts, "caches", 0, None, None)
        warm["warm_up"] = True
        boots.append(warm)
        print(f"# warm-up boot: {warm.get('boot_s')} s", flush=True)
        if plans is None:
            raise RuntimeError(f"warm-up boot failed: {warm.get('error')} (log {warm['log']})")
        for rnd in range(1, opts.rounds + 1):
            for variant in opts.variants:
                need = expected_boot_s(boots, variant) + 30
                if time.monotonic() - t_start + need > opts.budget_s:
                    print(f"# budget: stopping before {variant} round {rnd}", flush=True)
                    return finish(opts, boots, fs_info, plans, stopped=f"{variant} r{rnd}")
                rec, _ = boot_once(opts, variant, rnd, server, plans)
                boots.append(rec)
                print(f"# {variant} r{rnd}: {rec['how']} boot {rec.get('boot_s')} s", flush=True)
    finally:
        if server is not None:
            server.close()
    return finish(opts, boots, fs_info, plans, stopped=None)


def median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


def _plain_answers(boots: list[dict]) -> dict[int, set[str]]:
    """Per residue, the answer sha1s of every plain-process boot (the warm-up included)."""
    seen: dict[int, set[str]] = {}
    for b in boots:
        if b.get("how") == "plain" and not VARIANTS[b["variant"]][1]:
            for c in b.get("cells", []):
                seen.setdefault(c["residue"], set()).add(c["sha1"])
    return seen


def plain_reference(boots: list[dict]) -> dict[int, str]:
    """The plain answer per residue where all plain boots agree (else no reference)."""
    return {r: next(iter(s)) for r, s in _plain_answers(boots).items() if len(s) == 1}


def plain_disagreements(boots: list[dict]) -> list[int]:
    return sorted(r for r, s in _plain_answers(boots).items() if len(s) > 1)


def summarize(opts: Options, boots: list[dict]) -> list[dict]:
    counted = [b for b in boots if not b.get("warm_up")]
    ref = plain_reference(boots)
    rows = []
    for v in opts.variants:
        bs = [b for b in counted if b["variant"] == v]
        cells = [c for b in bs for c in b.get("cells", [])]
        same = sum(1 for c in cells if ref.get(c["residue"]) == c["sha1"])
        row = {"variant": v, "boots": len(bs), "forked": sum(b["how"] == "forked" for b in bs),
               "boot_s": median([b.get("boot_s") for b in bs]),
               "compile_hits": sum(b.get("cache", {}).get("compile") == "hit" for b in bs),
               "identical_to_plain": f"{same}/{len(cells)}" if ref else "no plain boot",
               "first_cell_ok": sum(bool(b.get("cells")) and b["cells"][0]["matches_passage"]
                                    for b in bs)}
        for s in STAGES:
            row[s] = median([(b.get("split") or {}).get("durations", {}).get(s) for b in bs])
        rows.append(row)
    def ratio(name: str, r: dict) -> float | None:
        base = next((x["boot_s"] for x in rows if x["variant"] == name), None)
        return round(r["boot_s"] / base, 2) if base and r["boot_s"] else None

    for r in rows:
        r["ratio_to_plain"] = ratio("plain", r)
        # `caches` is today's plain boot on a warm machine (its default cache, named).
        r["ratio_to_warm_plain"] = ratio("caches", r)
    return rows


def table(rows: list[dict]) -> str:
    cols = ["variant", "boots", "forked", "boot_s", "ratio_to_plain", "ratio_to_warm_plain",
            *STAGES, "compile_hits",
            "identical_to_plain", "first_cell_ok"]
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "\n".join("| " + " | ".join("—" if r[c] is None else str(r[c]) for c in cols)
                            + " |" for r in rows)


def finish(opts: Options, boots: list[dict], fs_info: dict, plans: list | None,
           stopped: str | None) -> dict:
    rows = summarize(opts, boots)
    result = {"engine": opts.engine, "model": opts.model, "residues": opts.residues,
              "context": opts.context, "cache_dir": str(opts.cache_dir), "stopped_at": stopped,
              "fork_server": fs_info, "summary": rows, "boots": boots,
              "plain_disagrees_at": plain_disagreements(boots),
              "cells": [p.as_dict() for p in plans] if plans else None}
    (opts.out / "gpu_boot.json").write_text(json.dumps(result, indent=2, default=str))
    print(table(rows))
    split = plain_disagreements(boots)
    print("# identical_to_plain: cells whose sha1 equals the one answer every plain-process "
          "boot (warm-up included) gave" + (f"; plain boots DISAGREE at residues {split}, "
                                            "no reference there" if split else ""))
    print(f"# first cell: residue {opts.residues[0]}, the first request of each fresh server; "
          "first_cell_ok counts boots whose answer matched the passage")
    print("# first_request_extra_s: first cell's latency minus the later cells' median (Triton "
          "JIT on first use); a broken first answer is shorter, so this reads low")
    fs = next((b for b in boots if b.get("how") == "forked"), None)
    if fs_info.get("usable"):
        print(f"# fork server imports (paid once per run, not in any forked boot_s): "
              f"{fs_info.get('wall_s')} s")
    elif fs is None and any(VARIANTS[v][1] for v in opts.variants):
        print(f"# fork server unusable, forked variants fell back: {fs_info.get('reason')}")
    print(f"# JSON: {opts.out / 'gpu_boot.json'}")
    return result


def describe(opts: Options) -> None:
    """The command lines of every variant ({port} stands for each boot's free port)."""
    argv, add = server_command(opts, 8000)
    argv = ["{port}" if a == "8000" else a for a in argv]
    print(f"# engine {opts.engine}; rounds {opts.rounds}; variants {','.join(opts.variants)}; "
          f"cells residues {opts.residues} at context {opts.context} (cold, in order)")
    print(f"# shared cache folder: {opts.cache_dir}; budget {opts.budget_s:.0f} s")
    print("# warm-up (uncounted) boot: variant caches")
    for v in opts.variants:
        shared, forked, _ = VARIANTS[v]
        env = variant_env(opts, v, add, f"{v}-rN")
        print(f"\n## {v}: caches {'shared' if shared else 'own, empty'}, "
              f"{'forked from the pre-imported parent' if forked else 'plain process'}")
        if forked:
            preload, optional = preload_lists(opts)
            fs = ForkServer(preload, optional, log_path="fork-server.log", python=opts.python)
            print("fork server: " + shell(fs.argv(), {}))
            args = argv[3:] if opts.engine == "lab" else child_argv(argv)
            print(f"child: entry {entry(opts)!r} argv " + " ".join(shlex.quote(a) for a in args))
            print("child env: " + shell([], child_env(opts, env)))
        else:
            print(shell(argv, env))
    print(flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse_args(argv)
    except UserError as exc:
        print(f"gpu_boot: error: {exc}", file=sys.stderr)
        return 2
    print("# " + " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]), flush=True)
    describe(opts)
    if opts.dry_run:
        print("nothing started (--dry-run)")
        return 0
    result = run(opts)
    return 0 if result["summary"] and all(r["boots"] for r in result["summary"]) else 1


if __name__ == "__main__":
    sys.exit(main())
