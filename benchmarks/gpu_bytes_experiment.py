"""Does a broken cell's bytes follow the compile cache, the machine, or neither? (issue 48;
run by benchmarks/gpu_bytes_experiment.sh in ONE device call on one GPU)

Every server runs the mode (``--poison``: the PoisonWorker fill, armed and filled after
readiness, and the kernel switches of ``engine.vllm.determinism`` with combo kernels off),
FULL_AND_PIECEWISE, no patches, CTX=huge (``gpu_find_state.server_argv``), context 1200,
and answers doc 0 at the rule residue cold then self-hit (plus residue 4's cold at k = 4, an
ok control). Kinds of server, all booted at once, then the copies:

- ``own``: ngram k = 4 (two) and k = 3 (one), each compiling into a cache of its own (on the
  first H200, 2026-12-06, three k = 4 and two k = 3 own compiles gave one answer per cell);
- ``pin``: one per k, own cache, plus the candidate pins of what differs between machines:
  FlashAttention's split-KV count in captured graphs fixed at 1 (the FULL verify graph the
  broken cell replays calls FA3 with ``num_splits`` up to 32, and FA3's heuristic picks the
  count from the GPU's SM count: ``flash_attn_max_num_splits_for_cuda_graph``, vLLM's own
  knob) and cuBLAS split-K off (``CUBLAS_WORKSPACE_CONFIG=:16:8``,
  ``CUBLASLT_WORKSPACE_SIZE=1``: what vLLM's batch-invariant mode sets on Hopper; that mode
  itself refuses the GDN backend), both chosen at run time from the GPU; and Inductor's split
  reductions off (``TORCHINDUCTOR_SPLIT_REDUCTIONS=0``: ``Reduction.num_splits`` in
  torch/_inductor/ir.py sizes a split from the GPU's SM count at compile time, so it travels
  with a cache);
- ``copy``: started from a copy of an own server's cache as soon as that server has saved
  its compile (the "saved AOT compiled function" line of its log, before its graphs are
  captured): a cache hit with this machine's compile and GPU;
- ``carried`` (``--from-cache DIR``, one per k, started at once): a vLLM cache made on
  another machine: its answer is that machine's if what differs is baked into the compile
  (Inductor's SM-sized splits), this machine's if it is chosen at run time (FA3's split
  count, cuBLAS's algorithm). Every copy rewrites the cache's index to its own folder
  (``gpu_bytes_caches.copy_cache``: vLLM loads the artefacts by absolute path).

Each record names the GPU (``harness.serve.gpu_info``) and the server's compile fingerprint
(``engine.vllm.caches.compile_fingerprint``, after readiness); the file list behind each
fingerprint goes to ``files-SERVER.json``. ``--summarize DIR`` prints the table and the
answer; ``--dry-run`` prints the servers' commands and starts nothing.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bytes_caches import copy_cache  # noqa: E402
from gpu_find_state import Server, chat, server_argv  # noqa: E402
from engine.vllm.caches import _unrooted, compile_dirs, compile_fingerprint  # noqa: E402
from engine.vllm.kernel_digest import entries  # noqa: E402
from engine.vllm.determinism import deterministic_env, fixed_compilation_argv  # noqa: E402
from harness.serve.gpu_info import gpu_record  # noqa: E402

EXT = ["--worker-extension-cls", "engine.vllm.poison.PoisonWorker"]
FILL = "state,kv,builders"
NGRAM = {"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2}
# cell: (k, the sends as (residue, phase)): the table rows on doc 0
# ("reset-cold": after /reset_prefix_cache, the ok control: another residue of the same doc)
SENDS = {4: ((5, "cold"), (5, "self-hit"), (4, "reset-cold")), 3: ((4, "cold"), (4, "self-hit"))}
# (name, k, kind) booted at once: compiles first, they take longest (~120 s, 7 at once on
# the H200); ~6.3 GB of GPU memory a server, 9 fit an H100
FIRST = [("k4-own0", 4, "own"), ("k4-own1", 4, "own"), ("k4-pin", 4, "pin"),
         ("k3-own0", 3, "own"), ("k3-pin", 3, "pin")]
CARRIED = [("k4-carried", 4), ("k3-carried", 3)]   # with --from-cache, started at once
COPIES = {"k4-copy0": "k4-own0", "k3-copy0": "k3-own0"}   # copy: its source
SAVED = "saved AOT compiled function to"   # the source's compile is on disk: copy it
COPY_NEEDS_S = 40   # a copy boots from a hit and sends: less left than this, it is skipped
PIN_ENV = {"CUBLAS_WORKSPACE_CONFIG": ":16:8", "CUBLASLT_WORKSPACE_SIZE": "1",
           "TORCHINDUCTOR_SPLIT_REDUCTIONS": "0"}
PIN_FA = {"flash_attn_max_num_splits_for_cuda_graph": 1}


def pin_fa_argv(site: Path | None) -> tuple[list[str], dict]:
    """FA's split count pinned, as the vLLM on the path spells it: ``--attention-config``
    (AttentionConfig has the field) or the older env ``VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH``;
    nothing when neither is found (the record says so through ``pin``)."""
    root = site / "vllm" if site else None
    def has(rel: str, word: str) -> bool:
        try:
            return root is not None and word in (root / rel).read_text(errors="replace")
        except OSError:
            return False
    if has("config/attention.py", "flash_attn_max_num_splits_for_cuda_graph"):
        return ["--attention-config", json.dumps(PIN_FA)], {}
    if has("envs.py", "VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH"):
        return [], {"VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH": "1"}
    return [], {}


def command(model: str, port: int, k: int, kind: str, cache: Path,
            site: Path | None) -> tuple[list[str], dict, dict]:
    """(argv, env, what was pinned) of one server: the mode on, its caches under ``cache``."""
    argv = fixed_compilation_argv(server_argv(model, port, {**NGRAM, "num_speculative_tokens": k},
                                              probe=False)) + EXT
    env = deterministic_env(cache)
    pinned: dict = {}
    if kind == "pin":
        fa_argv, fa_env = pin_fa_argv(site)
        argv, env = argv + fa_argv, {**env, **fa_env, **PIN_ENV}
        pinned = {"fa_splits": (fa_argv or list(fa_env)) or "not found in this vLLM",
                  "env": dict(PIN_ENV)}
    return argv, env, pinned


class Run:
    def __init__(self, out: Path, model: str, deadline: float, machine: str):
        from harness.prompts import ChatTokenizer, plan
        self.out, self.model, self.deadline, self.machine = out, model, deadline, machine
        self.t0 = time.monotonic()
        self.tok, self._plan = ChatTokenizer.from_dir(model), plan
        self.sink = open(out / "records.jsonl", "a")
        self.lock = threading.Lock()
        self.plans: dict = {}
        self.pids = open(out / "pids", "a")

    def plan_for(self, residue: int):
        with self.lock:
            if residue not in self.plans:
                (p,) = self._plan(self.tok.count_many, [residue], context=1200, modulus=128, seed=0)
                self.plans[residue] = p
            return self.plans[residue]

    def write(self, rec: dict) -> None:
        with self.lock:
            self.sink.write(json.dumps(rec) + "\n")
            self.sink.flush()

    def left(self) -> float:
        return self.deadline - time.monotonic()


def rpc(srv: Server, method: str, *args) -> dict:
    r = srv.http.post("/collective_rpc", json={"method": method, "args": list(args)})
    return r.json() if r.is_success else {"error": r.status_code, "text": r.text[-2000:]}


def boot_facts(run: Run, srv: Server, tag: dict, env: dict) -> dict:
    """After readiness: the GPU and the compile fingerprint (kernels digest bound to the GPU
    model and the server's cuBLAS/FA switches); the raw file list and the digest's rows go
    to ``files-SERVER.json`` (what a next fingerprint question is answered from)."""
    log = (run.out / f"{srv.name}.log").read_text(errors="replace")
    gpu = gpu_record(os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
    fp = compile_fingerprint(log, [g.get("model") for g in gpu or []], env)
    files, rows = [], []
    for d in compile_dirs(log):
        rows += entries(Path(d), _unrooted)
        for p in sorted(Path(d).rglob("*")):
            if p.is_file():
                files.append([str(p.relative_to(d)), hashlib.sha1(p.read_bytes()).hexdigest(),
                              p.stat().st_size])
    (run.out / f"files-{srv.name}.json").write_text(json.dumps(
        {"files": files, "kernel_rows": sorted(rows), "dirs": fp.get("dirs")}))
    from engine.vllm.bootlog import compile_cache_from_log
    return {**tag, "gpu": gpu, "compile": fp, "compile_cache": compile_cache_from_log(log)}


def serve(run: Run, srv: Server, tag: dict, k: int, env: dict, saved: threading.Event) -> None:
    """Wait for readiness (``saved`` is set once the log shows the compile on disk), record
    the boot, fill, send the cell's requests, stop."""
    log = run.out / f"{srv.name}.log"
    try:
        while not srv.ready():
            if not saved.is_set() and SAVED in log.read_text(errors="replace"):
                saved.set()
            if run.left() < 15:
                run.write({**tag, "boot": "timeout", "after_s": round(time.monotonic() - srv.t0, 1)})
                return
            time.sleep(1)
        saved.set()   # ready: whatever it compiled is on disk (a hit saves nothing new)
        facts = boot_facts(run, srv, tag, env)
        run.write({**facts, "boot": "ready", "after_s": round(time.monotonic() - srv.t0, 1)})
        run.write({**tag, "rpc": "arm", "result": rpc(srv, "residue_lab_arm")})
        run.write({**tag, "rpc": "boot-fill", "result": rpc(srv, "residue_lab_poison", FILL, "A")})
        for residue, phase in SENDS[k]:
            if phase == "reset-cold":   # the same document: without a reset it would hit
                srv.http.post("/reset_prefix_cache").raise_for_status()
            p = run.plan_for(residue)
            rec = chat(srv, run.model, p.messages)
            rec.update(tag, gpu=facts["gpu"], fingerprint=facts["compile"].get("fingerprint"),
                       residue=residue, phase=phase, doc=0, target_len=p.target_len,
                       ok=rec["text"] == p.expected,
                       sha=hashlib.sha1(rec["text"].encode()).hexdigest()[:12])
            rec["text"] = rec["text"][:300]
            run.write(rec)
    except Exception as exc:   # one server's failure must not lose the others
        run.write({**tag, "error": repr(exc)[:500]})
    finally:
        saved.set()
        srv.stop()


def start(run: Run, name: str, k: int, kind: str, cache: Path, port: int, site: Path | None,
          source: dict | None = None) -> tuple[Server, dict, dict]:
    argv, env, pinned = command(run.model, port, k, kind, cache, site)
    srv = Server(name, argv, port, run.out, env=env)
    run.pids.write(f"{srv.proc.pid}\n")
    run.pids.flush()
    tag = {"server": name, "k": k, "kind": kind, "machine": run.machine, "cache": str(cache),
           **({"source": source["server"], "copied": source} if source else {}),
           **({"pin": pinned} if pinned else {})}
    run.write({**tag, "started_s": round(time.monotonic() - run.t0, 1)})
    return srv, tag, env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summarize", type=Path, help="print the table of a run's records")
    ap.add_argument("--model")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--caches", type=Path, default=Path("/tmp/rl-bytes-caches"))
    ap.add_argument("--site", type=Path, default=Path("/tmp/site"), help="where vLLM is")
    ap.add_argument("--from-cache", type=Path, help="a cache root made on another machine")
    ap.add_argument("--limit", type=float, default=220)
    ap.add_argument("--machine", default="")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    if args.summarize:
        from gpu_bytes_summary import summarize
        print(summarize(sorted(args.summarize.glob("*records.jsonl*"))))
        return 0
    if args.dry_run:
        for i, (name, k, kind) in enumerate(FIRST):
            argv, env, pinned = command(args.model or "MODEL", 8500 + i, k, kind,
                                        args.caches / name, args.site)
            print(name, json.dumps(env, sort_keys=True), " ".join(argv), json.dumps(pinned))
        return 0
    if not (args.model and args.out):
        ap.error("--model and --out are required to run")
    return run_all(args)


def run_all(args) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.caches, ignore_errors=True)
    args.caches.mkdir(parents=True)
    run = Run(args.out, args.model, time.monotonic() + args.limit, args.machine)
    plan = [(n, k, kind, None) for n, k, kind in FIRST]
    if args.from_cache:   # another machine's compile, started at once beside the compiles
        plan += [(n, k, "carried", {"server": f"carried:{args.from_cache.name}",
                                    "dir": args.from_cache}) for n, k in CARRIED]
    plan += [(n, int(n[1]), "copy", {"server": src}) for n, src in COPIES.items()]
    saved = {n: threading.Event() for n, *_ in plan}

    def one(i: int, name: str, k: int, kind: str, source: dict | None) -> None:
        try:
            if source:
                copied = begin_copy(run, args, name, source, saved)
                if copied is None:
                    return
                source = {**source, **copied, "dir": str(source.get("dir", ""))}
            srv, tag, env = start(run, name, k, kind, args.caches / name, 8500 + i, args.site,
                                  source)
            serve(run, srv, tag, k, env, saved[name])
        except Exception as exc:   # one server's failure must not lose the others
            run.write({"server": name, "error": repr(exc)[:500]})
        finally:
            saved[name].set()

    with ThreadPoolExecutor(len(plan)) as pool:
        for f in [pool.submit(one, i, *row) for i, row in enumerate(plan)]:
            f.result()
    print(f"done in {time.monotonic() - run.t0:.0f}s", flush=True)
    return 0


def begin_copy(run: Run, args, name: str, source: dict, saved: dict) -> dict | None:
    """The copy's cache in place (its index rewritten), once its source's compile is on disk;
    None (recorded) when the source never saved one or too little time is left."""
    src = source["server"]
    if src in saved:   # a server of this call: wait for its compile
        saved[src].wait(max(run.left() - COPY_NEEDS_S, 0))
        root = args.caches / src
        if not saved[src].is_set() or not (root / "vllm").is_dir():
            run.write({"server": name, "skipped": f"{src} saved no compile in time",
                       "at_s": round(time.monotonic() - run.t0, 1)})
            return None
    else:
        root = Path(source["dir"])
    if run.left() < COPY_NEEDS_S:
        run.write({"server": name, "skipped": f"{round(run.left())} s left for a copy",
                   "at_s": round(time.monotonic() - run.t0, 1)})
        return None
    # vllm/ only, as a carried cache: Triton JITs its kernels again from the sources
    copied = copy_cache(root, args.caches / name)
    return {**copied, "at_s": round(time.monotonic() - run.t0, 1)}


if __name__ == "__main__":
    sys.exit(main())
