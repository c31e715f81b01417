"""Which memory decides a broken cell's answer, and does poisoning it make the answer the same
on every server? (issue 32; run by benchmarks/gpu_poison.sh on the lent H200)

Per cell (a configuration and the residue where a fresh server's first request breaks):
- a **probe** server (``--enable-sleep-mode`` + the worker extension
  ``engine.vllm.poison.PoisonWorker``): its first answers unpoisoned, then per method: heal
  (sleep level 1, wake, reset: the server as it booted, DESIGN.md section 1), fill ONE region
  with pattern A or B (or zero it), send the cell cold + self-hit and its two neighbours cold.
  A region the broken replay reads makes the answer follow the pattern (A != B); a region it
  does not read leaves the first answer (= first). Then, if time allows, every residue with
  the full fill before it (the no-false-positive pass).
- **plain** servers (no extension, no sleep mode): the fresh answers without the mode.
- **poisoned fresh** servers (extension, no sleep mode): filled with pattern A right after
  boot, before the first request, as ``--poison on`` does; then restore-by-fill (reset +
  the fill) and the cell again, on document 0 and on document 1.
One JSON line per request or RPC; ``--summarize DIR`` prints the tables.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_find_state import Server, chat, server_argv  # noqa: E402
from harness.prompts import ChatTokenizer, plan  # noqa: E402

EXT = ["--worker-extension-cls", "engine.vllm.poison.PoisonWorker"]
FULL = "state,kv,builders"
METHODS = ("none", "state:A", "state:B", "state:A", "kv:A", "kv:B", "null:A", "null:B",
           f"{FULL}:A", f"{FULL}:B", "bytes:A", "store0", "state0", "kv0")
CELLS = {  # name: (speculative config, rule residue)
    "ngram-k2": ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4,
                  "prompt_lookup_min": 2}, 3),
    "ngram-k4": ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                  "prompt_lookup_min": 2}, 5),
    "ngram-k5": ({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 5,
                  "prompt_lookup_min": 2}, 6),
    "mtp-k3": ({"method": "mtp", "num_speculative_tokens": 3}, 4),
    "mtp-k1": ({"method": "mtp", "num_speculative_tokens": 1}, 2),
}


def argv_for(model: str, port: int, spec: dict, kind: str) -> list[str]:
    """kind: plain (vLLM as is), poison (+ extension), probe (+ extension + sleep mode)."""
    argv = server_argv(model, port, spec, probe=False)
    if kind != "plain":
        argv += EXT
    if kind == "probe":
        argv += ["--enable-sleep-mode"]
    return argv


def rpc(srv: Server, method: str, *args) -> dict:
    r = srv.http.post("/collective_rpc", json={"method": method, "args": list(args)})
    if not r.is_success:
        return {"error": r.status_code, "text": r.text[-2000:]}
    return r.json()


def heal(srv: Server) -> dict:
    t = time.monotonic()
    srv.http.post("/sleep", params={"level": "1"}).raise_for_status()
    srv.http.post("/wake_up").raise_for_status()
    srv.http.post("/reset_prefix_cache").raise_for_status()
    return {"heal_s": round(time.monotonic() - t, 4)}


def poison(srv: Server, method: str) -> dict:
    """Apply one method after a reset: "none", "REGIONS:PATTERN", or a zeroing region."""
    if method == "none":
        return {}
    regions, _, pattern = method.partition(":")
    return rpc(srv, "residue_lab_poison", regions, pattern or "A")


class Run:
    def __init__(self, out: Path, model: str, tok, deadline: float):
        self.out, self.model, self.tok, self.deadline = out, model, tok, deadline
        self.sink = open(out / "records.jsonl", "a")
        self.plans: dict = {}

    def plan_for(self, seed: int, residues) -> dict:
        need = [r for r in residues if (seed, r) not in self.plans]
        if need:
            for p in plan(self.tok.count_many, need, context=1200, modulus=128, seed=seed):
                self.plans[(seed, p.residue)] = p
        return {r: self.plans[(seed, r)] for r in residues}

    def write(self, rec: dict) -> None:
        self.sink.write(json.dumps(rec) + "\n"); self.sink.flush()

    def send(self, srv: Server, cell: str, step: str, seed: int, residue: int, phase: str,
             extra: dict | None = None) -> dict:
        p = self.plan_for(seed, [residue])[residue]
        rec = chat(srv, self.model, p.messages)
        rec.update(cell=cell, server=srv.name, step=step, doc=seed, residue=residue,
                   phase=phase, target_len=p.target_len, ok=rec["text"] == p.expected,
                   sha=hashlib.sha1(rec["text"].encode()).hexdigest()[:12], **(extra or {}))
        self.write(rec)
        return rec

    def cell_set(self, srv, cell, step, rule, seed=0, neighbours=True) -> None:
        self.send(srv, cell, step, seed, rule, "cold")
        self.send(srv, cell, step, seed, rule, "self-hit")
        if neighbours:
            for n in (rule - 1, rule + 1):
                self.send(srv, cell, step, seed, n % 128, "cold")

    def left(self) -> float:
        return self.deadline - time.monotonic()


def probe(run: Run, srv: Server, cell: str, rule: int, sweep_all: bool,
          methods=METHODS) -> None:
    run.write({"cell": cell, "server": srv.name, "rpc": "arm", "result": rpc(srv, "residue_lab_arm")})
    run.write({"cell": cell, "server": srv.name, "rpc": "describe-boot",
               "result": rpc(srv, "residue_lab_describe")})
    run.cell_set(srv, cell, "first", rule, neighbours=False)
    for i, method in enumerate(methods):
        if run.left() < 30:
            return
        info = heal(srv)
        info["poison"] = poison(srv, method)
        run.write({"cell": cell, "server": srv.name, "rpc": f"{i}:{method}", "result": info})
        run.cell_set(srv, cell, f"{i}:{method}", rule)
    if not sweep_all:
        return
    for r in range(128):          # the no-false-positive pass: the full fill before each
        if run.left() < 20:
            return
        srv.http.post("/reset_prefix_cache").raise_for_status()
        info = poison(srv, f"{FULL}:A")
        run.send(srv, cell, "all", 0, r, "cold", {"poison_ok": info.get("results", [{}])[0].get("ok")
                                                  if isinstance(info.get("results"), list) else None})
        run.send(srv, cell, "all", 0, r, "self-hit")


def poisoned_fresh(run: Run, srv: Server, cell: str, rule: int, boot_fill: str = FULL) -> None:
    run.write({"cell": cell, "server": srv.name, "rpc": "arm", "result": rpc(srv, "residue_lab_arm")})
    run.write({"cell": cell, "server": srv.name, "rpc": "describe-boot",
               "result": rpc(srv, "residue_lab_describe")})
    run.write({"cell": cell, "server": srv.name, "rpc": "boot-fill",
               "result": poison(srv, f"{boot_fill}:A")})
    run.cell_set(srv, cell, "first", rule)
    for seed in (0, 1):
        if run.left() < 15:
            return
        srv.http.post("/reset_prefix_cache").raise_for_status()
        run.write({"cell": cell, "server": srv.name, "rpc": f"restore-fill-doc{seed}",
                   "result": poison(srv, f"{boot_fill}:A")})
        run.cell_set(srv, cell, f"restore-doc{seed}", rule, seed=seed, neighbours=False)


def plain_fresh(run: Run, srv: Server, cell: str, rule: int) -> None:
    run.cell_set(srv, cell, "first", rule)


def boot(servers: list[Server], timeout: float) -> list[Server]:
    deadline = time.monotonic() + timeout
    pending = list(servers)
    while pending and time.monotonic() < deadline:
        for s in list(pending):
            try:
                ok = s.ready()
            except RuntimeError as exc:
                print(exc, flush=True); pending.remove(s); continue
            if ok:
                pending.remove(s)
                print(f"{s.name} ready after {time.monotonic() - s.t0:.1f}s", flush=True)
        time.sleep(1)
    for s in pending:
        print(f"{s.name} not ready after {timeout:.0f}s", flush=True)
    return [s for s in servers if s not in pending and s.proc.poll() is None]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summarize", type=Path)
    ap.add_argument("--model")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--limit", type=float, default=520, help="seconds for the whole run")
    ap.add_argument("--probe-cells", default="ngram-k2,ngram-k4,mtp-k3")
    ap.add_argument("--fresh-cells", default="ngram-k2,ngram-k4,mtp-k3")
    ap.add_argument("--fresh-per-cell", type=int, default=2)
    ap.add_argument("--plain-per-cell", type=int, default=1)
    ap.add_argument("--methods", default="/".join(METHODS),
                    help="probe methods, '/'-separated (REGIONS:PATTERN, none, store0, ...)")
    ap.add_argument("--free-cells", default="",
                    help="one fresh server per cell whose boot fill adds the allocator's free memory")
    ap.add_argument("--sweep-all", action="store_true", help="probe: all 128 residues poisoned")
    args = ap.parse_args()
    if args.summarize:
        from gpu_poison_summary import summarize
        print(summarize(sorted(args.summarize.glob("*records.jsonl*"))))
        return 0
    if not (args.model and args.out):
        ap.error("--model and --out are required to run the probe")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    run = Run(args.out, args.model, ChatTokenizer.from_dir(args.model), t0 + args.limit)
    port = 8400
    def start(name: str, cell: str, kind: str) -> Server:
        nonlocal port
        port += 1
        return Server(name, argv_for(args.model, port, CELLS[cell][0], kind), port, args.out)

    first = [start(f"{c}-probe", c, "probe") for c in args.probe_cells.split(",") if c]
    first += [start(f"{c}-plain{i}", c, "plain") for c in args.fresh_cells.split(",") if c
              for i in range(args.plain_per_cell)]
    later: list[Server] = []
    try:
        ready = boot(first, min(330, run.left() - 60))
        # compile caches are warm now: the poisoned fresh servers boot faster
        later = [start(f"{c}-poison{i}", c, "poison") for c in args.fresh_cells.split(",") if c
                 for i in range(args.fresh_per_cell)]
        later += [start(f"{c}-free0", c, "poison") for c in args.free_cells.split(",") if c]
        jobs = []
        with ThreadPoolExecutor(16) as pool:
            for s in ready:
                cell = s.name.rsplit("-", 1)[0]
                fn = probe if s.name.endswith("probe") else plain_fresh
                extra = (args.sweep_all, args.methods.split("/")) if fn is probe else ()
                jobs.append(pool.submit(fn, run, s, cell, CELLS[cell][1], *extra))
            for s in boot(later, max(30, min(240, run.left() - 40))):
                cell = s.name.rsplit("-", 1)[0]
                fill_spec = f"free,{FULL}" if "-free" in s.name else FULL
                jobs.append(pool.submit(poisoned_fresh, run, s, cell, CELLS[cell][1], fill_spec))
            for j in jobs:
                try:
                    j.result()
                except Exception as exc:  # one server's failure must not lose the others
                    print(f"job failed: {exc!r}", flush=True)
    finally:
        for s in first + later:
            s.stop()
    print(f"done in {time.monotonic() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
