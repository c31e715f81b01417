"""Is a broken cell's answer the same on every server once kernel choices are fixed?
(issue 32, round 3 of the state hunt; run by benchmarks/gpu_determinism.sh on the lent H200)

The region hunt (``reports/h200/poison/``) found no region of the KV pool or the builders'
bookkeeping that moves a broken answer, and the answer following the server process.
This run tests the other per-process thing: kernel configs chosen by timing at boot
(``engine/vllm/determinism.py``). Two kinds of server, every one a fresh process:

- **plain**: vLLM as a user runs it, each with compile caches of its own (a cold boot
  tunes its own kernels, as on another machine), ``TRITON_PRINT_AUTOTUNING=1`` so the log
  shows what each tuned Triton kernel picked;
- **det** (the mode): the kernel switches of ``engine.vllm.determinism`` with one shared
  deterministic cache, the worker extension ``engine.vllm.poison.PoisonWorker``, armed and
  filled (state, kv, builders; pattern A) after readiness and before the first request.

Each server answers the cells' rule residue cold and self-hit on documents 0, 1 and 2026
(one never used before), the rule's neighbours cold on document 0; a det server then
restores by the fill (reset + fill) and answers document 0's rule cell again. The first
det and plain server of the broken MTP configuration also answer all 128 residues (cold and
self-hit, document 0; det: the fill before each cold send): the no-false-positive pass.
Servers run at most ``--at-once`` at a time, each stopped when its work is done.
One JSON line per request, RPC or boot; ``--summarize DIR`` prints the tables.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_find_state import Server, chat, server_argv  # noqa: E402
from harness.prompts import ChatTokenizer, plan  # noqa: E402
from engine.vllm.determinism import deterministic_env, fixed_compilation_argv  # noqa: E402

EXT = ["--worker-extension-cls", "engine.vllm.poison.PoisonWorker"]
FILL = "state,kv,builders"
DOCS = (0, 1, 2026)
NGRAM = {"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2}
CELLS = {  # name: (speculative config without the drafter path, rule residue)
    "ngram-k2": ({**NGRAM, "num_speculative_tokens": 2}, 3),
    "ngram-k4": ({**NGRAM, "num_speculative_tokens": 4}, 5),
    "ngram-k5": ({**NGRAM, "num_speculative_tokens": 5}, 6),
    "mtp-k1": ({"method": "mtp", "num_speculative_tokens": 1}, 2),
    "mtp-k3": ({"method": "mtp", "num_speculative_tokens": 3}, 4),
    "dflash-k7": ({"method": "dflash", "num_speculative_tokens": 7}, 8),
}
# (cell, kind) in start order: the first wave holds one det server of every cell (it
# compiles the shared deterministic cache) and the plain servers (each compiles its own)
FIRST = [(c, "det") for c in CELLS] + [("mtp-k3", "plain")] * 3
LATER = ([("mtp-k3", "det")] * 3 + [("ngram-k4", "det")] * 5 + [("ngram-k2", "det")] * 3
         + [("ngram-k5", "det")] * 3 + [("mtp-k1", "det")] * 3 + [("dflash-k7", "det")] * 3
         + [("ngram-k4", "plain"), ("ngram-k2", "plain"), ("mtp-k1", "plain")])
# --plan hashseed: does Python's string hashing decide what a compile makes? Deterministic
# servers that each compile into caches of their own, with PYTHONHASHSEED random per
# process (det-own) or 0 (det-seed0): round 3 found one answer per machine (its shared
# cache) and another on the next machine for the ngram cells, and set orders differing
# between the two machines' logs
HASHSEED = [(c, k) for c in ("ngram-k2", "ngram-k4") for k in ("det-own", "det-seed0")
            for _ in range(2)] + [("ngram-k2", "det-own"), ("ngram-k2", "det-seed0")]
# --plan combo: vLLM turns on Inductor's combo kernels and their benchmarking
# (vllm/config/compilation.py) unless inductor_compile_config names them; with both off
# (det-nocombo) do independent compiles agree where det-own ones did not?
COMBO = [("ngram-k2", k) for _ in range(5) for k in ("det-own", "det-nocombo")]
# --plan round4: the mode with combo kernels off (det-nc: one shared cache per machine, every
# cell on >= 4 servers, ngram k = 4 on 6) beside servers that each compile their own cache
# with combo kernels on (det-own, the split m3 saw) and off (det-nocombo): on two machines,
# does combo off give one answer per cell everywhere?
FIRST4 = ([(c, "det-nc") for c in CELLS]
          + [(c, k) for k in ("det-own", "det-nocombo") for c in ("ngram-k2",) * 3 + ("ngram-k4",)])
LATER4 = ([("ngram-k4", "det-nc")] * 5
          + [(c, "det-nc") for c in CELLS if c != "ngram-k4" for _ in range(3)])
PLANS = {"round3": FIRST + LATER, "hashseed": HASHSEED, "combo": COMBO, "round4": FIRST4 + LATER4}
FIRST_WAVE = {"round3": len(FIRST), "round4": len(FIRST4)}   # other plans: all compile


class Run:
    def __init__(self, out: Path, model: str, drafter: str, tok, deadline: float):
        self.out, self.model, self.drafter, self.tok = out, model, drafter, tok
        self.deadline = deadline
        self.sink = open(out / "records.jsonl", "a")
        self.lock = threading.Lock()
        self.plans: dict = {}

    def plan_for(self, seed: int, residue: int):
        with self.lock:
            if (seed, residue) not in self.plans:
                (p,) = plan(self.tok.count_many, [residue], context=1200, modulus=128, seed=seed)
                self.plans[(seed, residue)] = p
            return self.plans[(seed, residue)]

    def write(self, rec: dict) -> None:
        with self.lock:
            self.sink.write(json.dumps(rec) + "\n"); self.sink.flush()

    def send(self, srv: Server, tag: dict, step: str, seed: int, residue: int, phase: str) -> dict:
        p = self.plan_for(seed, residue)
        rec = chat(srv, self.model, p.messages)
        rec.update(tag, step=step, doc=seed, residue=residue, phase=phase,
                   target_len=p.target_len, ok=rec["text"] == p.expected,
                   sha=hashlib.sha1(rec["text"].encode()).hexdigest()[:12])
        self.write(rec)
        return rec

    def left(self) -> float:
        return self.deadline - time.monotonic()


def rpc(srv: Server, method: str, *args) -> dict:
    r = srv.http.post("/collective_rpc", json={"method": method, "args": list(args)})
    if not r.is_success:
        return {"error": r.status_code, "text": r.text[-2000:]}
    return r.json()


def fill(run: Run, srv: Server, tag: dict, step: str) -> None:
    run.write({**tag, "rpc": step, "result": rpc(srv, "residue_lab_poison", FILL, "A")})


def restore(run: Run, srv: Server, tag: dict, step: str, det: bool) -> None:
    srv.http.post("/reset_prefix_cache").raise_for_status()
    if det:
        fill(run, srv, tag, step)


def work(run: Run, srv: Server, tag: dict, sweep_all: bool) -> None:
    cell, det = tag["cell"], tag["kind"].startswith("det")
    rule = CELLS[cell][1]
    if det:
        run.write({**tag, "rpc": "arm", "result": rpc(srv, "residue_lab_arm")})
        fill(run, srv, tag, "boot-fill")
    again = "restored" if det else "reset"   # det: reset + the fill; plain: reset only
    for j, seed in enumerate(DOCS):
        if j:
            restore(run, srv, tag, f"{again}-doc{seed}", det)
        run.send(srv, tag, "fresh" if j == 0 else again, seed, rule, "cold")
        run.send(srv, tag, "fresh" if j == 0 else again, seed, rule, "self-hit")
    restore(run, srv, tag, f"{again}-neighbours", det)
    for n in (rule - 1, rule + 1):
        run.send(srv, tag, again, 0, n, "cold")
    restore(run, srv, tag, f"{again}-doc0", det)
    run.send(srv, tag, again, 0, rule, "cold")
    run.send(srv, tag, again, 0, rule, "self-hit")
    if not sweep_all:
        return
    for r in range(128):
        if run.left() < 25:
            return
        restore(run, srv, tag, f"all-{r}", det)
        run.send(srv, tag, "all", 0, r, "cold")
        run.send(srv, tag, "all", 0, r, "self-hit")


def argv_for(run: Run, port: int, cell: str, kind: str) -> list[str]:
    spec = dict(CELLS[cell][0])
    if spec["method"] == "dflash":
        spec["model"] = run.drafter
    argv = server_argv(run.model, port, spec, probe=False)
    if kind in ("det-nocombo", "det-nc"):   # combo kernels off, as the mode does it
        argv = fixed_compilation_argv(argv)
    return argv + EXT if kind.startswith("det") else argv


def env_for(kind: str, name: str, caches: Path) -> dict:
    if kind in ("det", "det-nc"):
        return deterministic_env(caches / kind)
    if kind in ("det-own", "det-nocombo"):
        return deterministic_env(caches / name)
    if kind == "det-seed0":
        return {**deterministic_env(caches / name), "PYTHONHASHSEED": "0"}
    own = caches / name
    return {"VLLM_CACHE_ROOT": str(own / "vllm"), "TORCHINDUCTOR_CACHE_DIR": str(own / "inductor"),
            "TRITON_CACHE_DIR": str(own / "triton"), "TRITON_PRINT_AUTOTUNING": "1"}


def serve_one(run: Run, srv: Server, tag: dict, boot_s: float, sweep_all: bool) -> None:
    t0 = time.monotonic()
    try:
        while not srv.ready():
            if time.monotonic() - srv.t0 > boot_s or run.left() < 20:
                run.write({**tag, "boot": "timeout", "after_s": round(time.monotonic() - srv.t0, 1)})
                return
            time.sleep(1)
        run.write({**tag, "boot": "ready", "after_s": round(time.monotonic() - srv.t0, 1)})
        work(run, srv, tag, sweep_all)
        run.write({**tag, "done_s": round(time.monotonic() - t0, 1)})
    except Exception as exc:  # one server's failure must not lose the others
        run.write({**tag, "error": repr(exc)[:500]})
    finally:
        srv.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summarize", type=Path)
    ap.add_argument("--model")
    ap.add_argument("--drafter")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--caches", type=Path, default=Path("/tmp/rl-det-caches"))
    ap.add_argument("--limit", type=float, default=540, help="seconds for the whole run")
    ap.add_argument("--at-once", type=int, default=9, help="servers at a time")
    ap.add_argument("--machine", default="", help="a label for this machine in the records")
    ap.add_argument("--plan", choices=sorted(PLANS), default="round3")
    args = ap.parse_args()
    if args.summarize:
        from gpu_determinism_summary import summarize
        print(summarize(sorted(args.summarize.glob("*records.jsonl*"))))
        return 0
    if not (args.model and args.drafter and args.out):
        ap.error("--model, --drafter and --out are required to run")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    run = Run(args.out, args.model, args.drafter, ChatTokenizer.from_dir(args.model),
              t0 + args.limit)
    swept: set[str] = set()   # kinds whose first mtp-k3 server answers all 128 residues
    with ThreadPoolExecutor(args.at_once) as pool:
        futures = []
        for i, (cell, kind) in enumerate(PLANS[args.plan]):
            name = f"{cell}-{kind}{i}"
            tag = {"cell": cell, "kind": kind, "server": name, "machine": args.machine}
            sweep_all = args.plan == "round3" and cell == "mtp-k3" and kind not in swept
            if sweep_all:
                swept.add(kind)
            first = i < FIRST_WAVE.get(args.plan, len(PLANS[args.plan]))
            def job(i=i, cell=cell, kind=kind, name=name, tag=tag, sweep_all=sweep_all, first=first):
                if run.left() < 100:
                    return
                srv = Server(name, argv_for(run, 8400 + i, cell, kind), 8400 + i, args.out,
                             env=env_for(kind, name, args.caches))
                run.write({**tag, "started_s": round(time.monotonic() - t0, 1)})
                serve_one(run, srv, tag, 420 if first else 240, sweep_all)
            futures.append(pool.submit(job))
        for f in futures:
            f.result()
    print(f"done in {time.monotonic() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
