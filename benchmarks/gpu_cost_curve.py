"""The cost curve at the users' scale (issue 35): per model shape, on one GPU, what a boot,
one point's requests, a sleep-cycle restore and the state-only restore cost, and the bytes
each moves. **Dummy weights: cost only, no verdicts** (every record and table says so).

Servers (``--servers``, default ``2b@4.9,2b@4.9:prefork,2b@20,27b@20``): ``SHAPE@KV_GIB``
boots ``benchmarks/shapes/qwen35-SHAPE-dummy`` with ``--load-format dummy`` at the CTX=huge
geometry (ngram k = 3, FULL_AND_PIECEWISE, block 128, ``--prefix-match-unit`` 128, prefix
caching, ``max_model_len`` 245,760, hybrid flags, ``--language-model-only``) with its KV pool
pinned at KV_GIB, ``--enable-sleep-mode``, ``VLLM_SERVER_DEV_MODE=1`` and, where
``engine/vllm/poison.py`` is in the tree, ``--worker-extension-cls
engine.vllm.poison.PoisonWorker``. ``:prefork`` boots the same server forked from a
pre-imported parent (``engine.prefork``, the mechanism of ``--launcher prefork``) and only
measures its boot. 2B at 4.9 and 20 GiB tells the KV pool's share from the model's; 2B and
27B at 20 GiB the model's from the pool's.

Everything boots at once (one GPU, each server's own memory: weights + pinned KV + ~4 GiB),
then the measurements run one at a time (a sleep beside a booting server fails: "Memory
usage increased after sleeping"):
- round 0: each server's first point (cold + self-hit), not in the medians;
- rounds 1..N (``--points``), per server in turn: the sleep cycle of ``--isolation restore``
  (``harness.serve.restore``: sleep level 1, wake, reset, each step timed; the GiB the allocator
  backed up, i.e. the weights moved to the host and back, and discarded, the KV cache);
  the state fill (``POST /reset_prefix_cache``, then ``POST /collective_rpc {"method":
  "residue_lab_poison", "args": ["state,kv", "A"]}``: ``engine.vllm.poison`` fills and
  proves the GDN state and the attention KV); and one point: a cold request and its
  self-hit, a templated prompt planned by ``harness.prompts`` (context ``--context``, its own
  residue each round), ``max_tokens`` = the expected answer's tokens + 1 (a correct
  answer's length: dummy weights never stop on their own).
An action starts only if the slowest one of its kind on that server so far still fits before
``--deadline-s`` (minus a reserve for the teardown); past its first three, a sleep cycle also
leaves the time the remaining rounds' points and fills need. The run then stops, kills its servers,
and writes what it has: ``records.jsonl`` (one line per boot, point, fill, sleep, skip),
``manifest.json`` and ``cost_curve.md`` (the table, ratios to the first server).

    python3 benchmarks/gpu_cost_curve.py --out DIR --deadline-s 480     # on the device
    python3 benchmarks/gpu_cost_curve.py --out DIR --dry-run            # prints, starts nothing
    python3 benchmarks/gpu_cost_curve.py --summarize DIR                # the table again
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.cost_restore import KIND_GUESS_S, PoolKinds, pool_in_tree  # noqa: E402
from benchmarks.cost_table import NOTE, write_table  # noqa: E402
from benchmarks.shapes.make_shapes import count_params, kv_geometry, text_config  # noqa: E402

GiB = 2**30
SHAPES = {"2b": "qwen35-2b-dummy", "9b": "qwen35-9b-dummy", "27b": "qwen35-27b-dummy"}
DEFAULT_SERVERS = "2b@4.9,2b@4.9:prefork,2b@20,27b@20"
POISON_FILE = ROOT / "engine" / "vllm" / "poison.py"
LAB_MODEL_DIR = ROOT / "engine" / "lab" / "model"
POISON_CLS, POISON_METHOD, POISON_ARGS = ("engine.vllm.poison.PoisonWorker",
                                          "residue_lab_poison", ["state,kv", "A"])
OVERHEAD_GIB = 4.0     # per server: CUDA context, the profile run's activations, graphs
DEVICE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
              "VLLM_USE_FLASHINFER_SAMPLER": "0", "PYTHONUNBUFFERED": "1",
              "VLLM_SERVER_DEV_MODE": "1"}
LAB_PRELOAD = ("engine.lab.cli", "engine.lab.serve", "engine.lab.server")
FIRST_GUESS_S = {"point": 60.0, "fill": 20.0, "sleep": 60.0,   # before one was measured
                 **KIND_GUESS_S}
RESERVE_S = 25.0       # kept for the teardown and the files
MIN_SLEEPS = 3         # sleep cycles per server before the points and fills come first


class UserError(Exception):
    """A bad argument: one line on stderr, exit 2."""


@dataclass
class ServerSpec:
    shape: str
    kv_gib: float
    launcher: str = "plain"

    @property
    def name(self) -> str:
        return f"{self.shape}@{self.kv_gib:g}" + (":prefork" if self.launcher == "prefork" else "")

    @property
    def boot_only(self) -> bool:
        return self.launcher == "prefork"

    @property
    def model(self) -> Path:
        return ROOT / "benchmarks" / "shapes" / SHAPES[self.shape]

    def facts(self) -> dict[str, Any]:
        tc = text_config(SHAPES[self.shape])
        params = count_params(tc)["total"]
        geo = kv_geometry(tc)
        return {"params": params, "weights_gib_est": round(2 * params / GiB, 2),
                "kv_gib": self.kv_gib, "block_size_est": geo["block_size"],
                "max_len_request_gib": round(geo["max_len_request_bytes"] / GiB, 2)}


def parse_servers(text: str) -> list[ServerSpec]:
    out = []
    for item in [s for s in text.split(",") if s]:
        head, _, launcher = item.partition(":")
        shape, _, kv = head.partition("@")
        if shape not in SHAPES or launcher not in ("", "plain", "prefork"):
            raise UserError(f"--servers: {item!r}: expected SHAPE@KV_GIB[:prefork], SHAPE one "
                            f"of {', '.join(SHAPES)}")
        try:
            spec = ServerSpec(shape, float(kv), launcher or "plain")
        except ValueError:
            raise UserError(f"--servers: {item!r}: KV_GIB must be a number") from None
        need = spec.facts()["max_len_request_gib"]
        if spec.kv_gib < need:
            raise UserError(f"--servers: {item}: one 245,760-token request of {shape} needs "
                            f"{need} GiB of KV cache; vLLM would refuse to boot")
        out.append(spec)
    if not any(not s.boot_only for s in out):
        raise UserError("--servers: no server to measure (each is :prefork, boot only)")
    return out


@dataclass
class Options:
    servers: list[ServerSpec]
    out: Path
    deadline_s: float
    points: int
    context: int
    max_tokens: int | None
    boot_timeout: float
    cache_dir: Path | None
    gpu: str
    gpu_gib: float
    util: float
    python: str
    dry_run: bool
    fill: bool = field(default=False)
    engine: str = "vllm"      # "lab": the CPU lab engine serves every shape (the mechanism)
    sleep: bool = True        # --no-sleep: no sleep cycles (the 27B one's first takes ~60 s)
    in_turn: bool = False     # --in-turn: boot, measure and stop one server at a time
    pool: bool = False        # issue 51's kinds: storage fill, dirty restore, bandwidth


def parse_args(argv: list[str] | None) -> Options | Path:
    ap = argparse.ArgumentParser(prog="benchmarks/gpu_cost_curve.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default=DEFAULT_SERVERS, help="SHAPE@KV_GIB[:prefork],...")
    ap.add_argument("--out", help="output folder (records, manifest, table, server logs)")
    ap.add_argument("--deadline-s", type=float, default=480.0,
                    help="seconds from the start by which everything is written")
    ap.add_argument("--points", type=int, default=20, help="measured rounds per kind")
    ap.add_argument("--context", type=int, default=1200, help="templated prompt length aimed at")
    ap.add_argument("--max-tokens", type=int, help="default: the expected answer's tokens + 1")
    ap.add_argument("--boot-timeout", type=float, default=420.0)
    ap.add_argument("--cache-dir", default="/tmp/residue-lab-boot-cache",
                    help="shared compile caches ('' = each server's default)")
    ap.add_argument("--gpu", default="0", help="CUDA_VISIBLE_DEVICES of every server")
    ap.add_argument("--gpu-gib", type=float, default=139.0, help="the GPU's memory (a check)")
    ap.add_argument("--util", type=float, default=0.04, help="--gpu-memory-utilization")
    ap.add_argument("--python", default=sys.executable, help="interpreter of the servers")
    ap.add_argument("--no-fill", action="store_true", help="no worker extension, no fills")
    ap.add_argument("--engine", choices=("vllm", "lab"), default="vllm",
                    help="lab: the CPU lab engine stands in for every shape (no fills)")
    ap.add_argument("--no-sleep", action="store_true", help="no sleep cycles")
    ap.add_argument("--in-turn", action="store_true",
                    help="boot, measure and stop one server at a time (an 80 GB GPU)")
    ap.add_argument("--no-pool", action="store_true",
                    help="no once-per-storage fill, dirty restore or bandwidth (issue 51)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands; start nothing")
    ap.add_argument("--summarize", help="write DIR/cost_curve.md from DIR's records; print it")
    a = ap.parse_args(argv)
    if a.summarize:
        return Path(a.summarize)
    if not a.out:
        raise UserError("--out is required (or --summarize DIR)")
    if a.points < 1 or a.context < 200:
        raise UserError("--points must be at least 1 and --context at least 200")
    servers = parse_servers(a.servers)
    each = [s.facts()["weights_gib_est"] + s.kv_gib + OVERHEAD_GIB for s in servers]
    need = max(each) if a.in_turn else sum(each)
    if need > a.gpu_gib and a.engine == "vllm":
        raise UserError(f"--servers need about {need:.0f} GiB at once (weights + KV + "
                        f"{OVERHEAD_GIB:g} GiB each), more than --gpu-gib {a.gpu_gib:g}"
                        + ("" if a.in_turn else "; --in-turn boots one at a time"))
    # the lab serves the fill's RPCs itself (engine/lab/poison.py)
    fill = not a.no_fill and (a.engine == "lab" or _poison_in_tree())
    return Options(servers=servers, out=Path(a.out), deadline_s=a.deadline_s, points=a.points,
                   context=a.context, max_tokens=a.max_tokens, boot_timeout=a.boot_timeout,
                   cache_dir=Path(a.cache_dir) if a.cache_dir else None, gpu=a.gpu,
                   gpu_gib=a.gpu_gib, util=a.util, python=a.python, dry_run=a.dry_run,
                   fill=fill, engine=a.engine, sleep=not a.no_sleep, in_turn=a.in_turn,
                   pool=fill and not a.no_pool and pool_in_tree())


def _poison_in_tree() -> bool:
    """``engine/vllm/poison.py`` with the worker class and the method this script calls."""
    try:
        text = POISON_FILE.read_text()
    except OSError:
        return False
    return "class PoisonWorker" in text and f"def {POISON_METHOD}" in text


def _no_fill_why(opts: Options) -> str:
    if not _poison_in_tree() and opts.engine == "vllm":
        return ("engine/vllm/poison.py (PoisonWorker.residue_lab_poison) is not in this tree: "
                "the sleep cycle only")
    return "--no-fill: the sleep cycle only"


# -- commands --------------------------------------------------------------------------
def server_command(opts: Options, spec: ServerSpec, port: int) -> tuple[list[str], dict[str, str]]:
    if opts.engine == "lab":
        return [opts.python, "-m", "engine.lab", "--port", str(port), "--enable-prefix-caching",
                "--block-size", "128", "--prefix-match-unit", "128", "--max-model-len", "245760",
                "--speculative-config", '{"method":"ngram","num_speculative_tokens":3}',
                "-cc", '{"cudagraph_mode":"FULL_AND_PIECEWISE"}', "--patches", "none",
                "--enable-prompt-tokens-details", "--enable-sleep-mode",
                "--served-model-name", SHAPES[spec.shape]], \
            {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    from engine.presets import resolve
    from engine.vllm.launch import build_launch

    cfg = resolve("ngram", "huge", engine="vllm", model=str(spec.model), patches="none",
                  geometry="hybrid", draft_tokens=3, cudagraph_mode="FULL_AND_PIECEWISE",
                  prefix_caching=True, block_size=128, prefix_match_unit=128,
                  max_model_len=245_760, kv_cache_memory_bytes=int(spec.kv_gib * GiB))
    extra = ["--load-format", "dummy", "--language-model-only", "--enable-sleep-mode",
             "--gpu-memory-utilization", str(opts.util), "--max-num-seqs", "8",
             "--served-model-name", SHAPES[spec.shape]]
    if opts.fill:
        extra += ["--worker-extension-cls", POISON_CLS]
    launch = build_launch(cfg, port=port, model=str(spec.model), gpu=opts.gpu,
                          python=opts.python, extra_args=extra, base_env=DEVICE_ENV)
    env = dict(launch.env)
    if opts.cache_dir is not None:
        from engine.vllm.caches import cache_env
        env.update(cache_env(opts.cache_dir, create=not opts.dry_run))
    return launch.argv, env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the run ---------------------------------------------------------------------------
class Run(PoolKinds):
    """One call's servers, clock and records (every line written at once: a kill keeps them)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.t0 = time.monotonic()
        self.stop_reason: str | None = None
        opts.out.mkdir(parents=True, exist_ok=True)
        (opts.out / "logs").mkdir(exist_ok=True)
        self.sink = open(opts.out / "records.jsonl", "a")
        self.servers: dict[str, dict[str, Any]] = {}
        self.slowest: dict[tuple[str, str], float] = {}
        self.done: dict[tuple[str, str], int] = {}
        self.fork_server = None

    def left(self) -> float:
        return self.opts.deadline_s - (time.monotonic() - self.t0)

    def record(self, kind: str, server: str | None, **fields: Any) -> dict:
        rec = {"cost_only": True, "note": NOTE, "kind": kind, "server": server,
               "t_s": round(time.monotonic() - self.t0, 3), **fields}
        self.sink.write(json.dumps(rec, default=str) + "\n")
        self.sink.flush()
        return rec

    def fits(self, name: str, kind: str, keep: float = 0.0) -> bool:
        """Whether the slowest ``kind`` so far on ``name`` still fits, with the reserve and
        ``keep`` seconds left over (else a ``skip`` record says why)."""
        if self.stop_reason:
            return False
        need = self.slowest.get((name, kind), FIRST_GUESS_S[kind])
        if self.left() < need + RESERVE_S + keep:
            kept = f" + {keep:.0f} s kept for the remaining points and fills" if keep else ""
            self.record("skip", name, what=kind, why=f"{self.left():.0f} s left, {kind} may take "
                        f"{need:.1f} s + {RESERVE_S:g} s reserve{kept}")
            return False
        return True

    def sleep_fits(self, name: str, live: dict, rnd: int) -> bool:
        """A sleep cycle (the costly kind at 27B) takes only the time the remaining rounds'
        points and fills do not need, once each server has ``MIN_SLEEPS``: the state fill
        against its point's request time is the goal, the sleep cycle stands beside it."""
        if self.done.get((name, "sleep"), 0) < MIN_SLEEPS:
            return self.fits(name, "sleep")
        per_round = sum(self.slowest.get((m, "point"), FIRST_GUESS_S["point"])
                        + (self.slowest.get((m, "fill"), 1.0) if self.opts.fill else 0.0)
                        + sum(self.slowest.get((m, k), 1.0) for k in ("storage_fill",
                              "dirty_restore") if self.opts.pool)
                        for m in live)
        return self.fits(name, "sleep", keep=per_round * (self.opts.points - rnd + 1))

    def took(self, name: str, kind: str, seconds: float) -> None:
        self.slowest[(name, kind)] = max(seconds, self.slowest.get((name, kind), 0.0))
        self.done[(name, kind)] = self.done.get((name, kind), 0) + 1

    # -- boot ----------------------------------------------------------------------------
    def start_all(self, specs: list[ServerSpec] | None = None) -> None:
        """Every plain server first, then the pre-imported parent (in this thread: a child
        started with PR_SET_PDEATHSIG dies with the thread that started it), whose imports
        take as long as a plain start-up, then the forked servers."""
        from engine.prefork import start_child

        specs = self.opts.servers if specs is None else specs
        forked = [s for s in specs if s.launcher == "prefork"]
        for spec in [s for s in specs if s.launcher == "plain"] + forked:
            port = free_port()
            argv, add = server_command(self.opts, spec, port)
            env = {**os.environ, **add}
            log = self.opts.out / "logs" / f"{spec.name.replace(':', '-')}.log"
            if spec.launcher == "prefork":
                if spec is forked[0]:
                    self._start_fork_server(add)
                fs = self.fork_server
                entry, args, child_env = self._fork_form(argv, env)
                child = start_child(argv, env=env, log_path=log, cwd=ROOT, server=fs,
                                    entry=entry, child_argv=args, child_env=child_env,
                                    fallback_reason=None if fs else "fork server unavailable")
            else:
                child = start_child(argv, env=env, log_path=log, cwd=ROOT)
            self.servers[spec.name] = {"spec": spec, "port": port, "child": child, "log": log,
                                       "argv": argv, "env": add, "healthy_at": None}

    def _fork_form(self, argv: list[str], env: dict[str, str]):
        """The entry, child argv and env of ``argv`` forked from the pre-imported parent."""
        if self.opts.engine == "lab":
            return "-m engine.lab", argv[3:], env
        from engine.vllm.prefork import VLLM_ENTRY, child_argv
        return VLLM_ENTRY, child_argv(argv), self._fork_env(env)

    def _fork_env(self, env: dict[str, str]) -> dict[str, str]:
        """The engine core forked too (vLLM), as ``--launcher prefork`` does."""
        if self.opts.engine == "lab":
            return env
        from engine.vllm.prefork import forked_env
        return forked_env(env)

    def _start_fork_server(self, env: dict[str, str]) -> None:
        from engine.prefork import ForkServer, ForkServerUnavailable
        from engine.vllm.prefork import VLLM_PRELOAD, VLLM_PRELOAD_OPTIONAL

        preload, optional = ((LAB_PRELOAD, ()) if self.opts.engine == "lab"
                             else (VLLM_PRELOAD, VLLM_PRELOAD_OPTIONAL))
        t = time.monotonic()
        fs = ForkServer(preload, optional, python=self.opts.python, cwd=ROOT,
                        log_path=self.opts.out / "logs" / "fork-server.log",
                        env=self._fork_env({**os.environ, **env}))
        try:
            self.fork_server = fs.start()
            self.record("fork_server", None, import_s=round(time.monotonic() - t, 3), usable=True)
        except ForkServerUnavailable as exc:
            self.record("fork_server", None, usable=False, why=str(exc))

    def wait_healthy(self) -> None:
        """Each server until its /health answers 200, it exits, or ``--boot-timeout`` has
        passed since its own start (then it is stopped: one still booting must not allocate
        beside the others' sleep cycles), within the deadline."""
        import httpx

        pending = {n: s for n, s in self.servers.items() if "boot" not in s}
        while pending and self.left() > RESERVE_S and not self.stop_reason:
            for name, s in list(pending.items()):
                rc = s["child"].poll()
                late = time.time() - s["child"].started_at > self.opts.boot_timeout
                if rc is not None or late:
                    self._boot_record(name, s, error=f"exited {rc} before /health" if rc is not None
                                      else f"no /health within {self.opts.boot_timeout:g} s")
                    s["survivors"] = s["child"].kill(grace=10)
                    del pending[name]
                    continue
                try:
                    ok = httpx.get(f"http://127.0.0.1:{s['port']}/health", timeout=2,
                                   trust_env=False).status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok:
                    s["healthy_at"] = time.time()
                    self._boot_record(name, s)
                    del pending[name]
            time.sleep(0.5)      # polling the readiness condition itself
        for name, s in pending.items():
            why = self.stop_reason or "time"
            self._boot_record(name, s, error=f"not healthy by the deadline ({why})")
            s["survivors"] = s["child"].kill(grace=10)

    def _boot_record(self, name: str, s: dict, error: str | None = None) -> None:
        from engine.vllm.bootlog import parse_boot_log
        from engine.vllm.effective import parse_effective_config

        text = s["log"].read_text(errors="replace") if s["log"].exists() else ""
        child, spec = s["child"], s["spec"]
        split = parse_boot_log(text, started_at=child.started_at, health_at=s["healthy_at"])
        eff = parse_effective_config(text)
        s["boot"] = self.record(
            "boot", name, shape=spec.shape, launcher=spec.launcher,
            how=child.how, fallback_reason=child.fallback_reason, error=error,
            boot_s=round(s["healthy_at"] - child.started_at, 3) if s["healthy_at"] else None,
            stages=split.durations(), compile_cache=split.compile_cache,
            weights_gib=split.weights_gib,
            kv_cache_tokens=eff.get("kv_cache_tokens"), block_size=eff.get("block_size"),
            effective={k: eff.get(k) for k in ("kv_cache_memory_gib", "max_concurrency",
                                               "mamba_page_padding_pct", "boot_error")},
            last_log_line=text.strip().splitlines()[-1][-300:] if error and text.strip() else None,
            **spec.facts())

    # -- measurements --------------------------------------------------------------------
    async def measure(self, names: set[str] | None = None) -> None:
        import httpx

        from harness.serve.client import EngineClient
        from harness.prompts import ChatTokenizer, plan

        live = {n: s for n, s in self.servers.items() if s["healthy_at"]
                and not s["spec"].boot_only and (names is None or n in names)}
        for n, s in self.servers.items():
            if s["spec"].boot_only and "survivors" not in s:
                s["survivors"] = s["child"].kill(grace=10)      # its boot is all it measures
        if not live:
            if self.opts.in_turn:      # the next server may still boot
                self.record("skip", ",".join(sorted(names or ())), what="server",
                            why="did not boot")
            else:
                self.stop_reason = "no server to measure booted"
            return
        tok = ChatTokenizer.from_dir(next(iter(live.values()))["spec"].model
                                     if self.opts.engine == "vllm" else LAB_MODEL_DIR)
        residues = [(5 + 37 * i) % 128 for i in range(self.opts.points + 1)]
        plans = plan(tok.count_many, residues, context=self.opts.context, modulus=128, seed=0)
        max_tokens = self.opts.max_tokens or len(tok.encode_text(plans[0].expected)) + 1
        self.record("plan", None, residues=residues, context=self.opts.context,
                    target_lens=[p.target_len for p in plans], max_tokens=max_tokens)
        clients = {n: EngineClient(f"http://127.0.0.1:{s['port']}", timeout=120)
                   for n, s in live.items()}
        self.rpc = httpx.AsyncClient(timeout=120, trust_env=False)   # /collective_rpc
        try:
            for n in live:
                if self.opts.pool:
                    await self.pool_boot(n, clients[n])
                if self.fits(n, "point"):
                    await self.point(n, clients[n], plans[0], max_tokens, first=True)
            for r in range(1, self.opts.points + 1):
                for n in live:     # one round: a sleep cycle, the restores, a point
                    if (self.opts.sleep and not live[n].get("sleep_failed")
                            and self.sleep_fits(n, live, r)):
                        await self.sleep(n, clients[n], r)
                    if self.opts.pool:     # the last point's blocks, then the whole fills
                        await self.dirty_restore(n, clients[n], r)
                    filled = self.opts.fill and self.fits(n, "fill")
                    if filled:
                        await self.fill(n, clients[n], r)
                    if self.opts.pool:
                        await self.storage_fill(n, clients[n], r)
                    if self.fits(n, "point"):
                        if not filled:      # the cold request must be cold: no earlier prefix
                            await clients[n].reset_prefix_cache()
                        await self.point(n, clients[n], plans[r], max_tokens, rnd=r)
            for n in live if self.opts.pool else ():
                await self.audit(n, clients[n], self.opts.points + 1)
        finally:
            for c in clients.values():
                await c.aclose()
            await self.rpc.aclose()

    async def point(self, name: str, client, p, max_tokens: int, rnd: int = 0,
                    first: bool = False) -> None:
        model = SHAPES[self.servers[name]["spec"].shape]
        t = time.monotonic()
        phases = {}
        try:
            for phase in ("cold", "self-hit"):
                r = await client.chat(list(p.messages), model=model, max_tokens=max_tokens)
                phases[phase] = {"s": round(r.latency_s, 4), "prompt_tokens": r.prompt_tokens,
                                 "cached_tokens": r.cached_tokens,
                                 "completion_tokens": r.completion_tokens}
        except Exception as exc:      # recorded; the run goes on with the other servers
            self.record("point", name, round=rnd, error=f"{type(exc).__name__}: {exc}")
            return
        s = round(time.monotonic() - t, 4)
        self.took(name, "point", s)
        self.record("point", name, round=rnd, first_after_boot=first, residue=p.residue,
                    target_len=p.target_len, s=s, phases=phases)

    async def fill(self, name: str, client, rnd: int) -> None:
        t = time.monotonic()
        try:
            await client.reset_prefix_cache()
            reset_s = time.monotonic() - t
            resp = await self.rpc.post(f"{client.base_url}/collective_rpc", json={
                "method": POISON_METHOD, "args": POISON_ARGS})
            resp.raise_for_status()
            result = (resp.json().get("results") or [None])[0]
        except Exception as exc:
            self.record("fill", name, round=rnd, error=f"{type(exc).__name__}: {exc}")
            return
        s = round(time.monotonic() - t, 4)
        self.took(name, "fill", s)
        self.record("fill", name, round=rnd, s=s, reset_s=round(reset_s, 4),
                    rpc_s=round(s - reset_s, 4), proven=(result or {}).get("ok"), result=result)

    async def sleep(self, name: str, client, rnd: int) -> None:
        from harness.serve.restore import restore_server, sleep_lines

        log = self.servers[name]["log"]
        offset = log.stat().st_size
        t = time.monotonic()
        try:
            info = await restore_server(client, log)
        except Exception as exc:
            self.servers[name]["sleep_failed"] = True
            self.record("sleep", name, round=rnd, error=f"{type(exc).__name__}: {exc}")
            try:
                await client.wake_up()
            except Exception:
                pass
            return
        s = round(time.monotonic() - t, 4)
        self.took(name, "sleep", s)
        with open(log, errors="replace") as fh:
            fh.seek(offset)
            lines = sleep_lines(fh.read())
        self.record("sleep", name, round=rnd, s=s, steps=info["steps"],
                    allocator=lines[-1] if lines else None, metrics=info.get("metrics"))

    def stop(self, names: set[str]) -> None:
        """Stop the named servers (in turn: the next one needs the GPU)."""
        for n in names:
            s = self.servers.get(n)
            if s is not None and "survivors" not in s:
                s["survivors"] = s["child"].kill(grace=10)

    def teardown(self) -> None:
        with ThreadPoolExecutor(max(1, len(self.servers))) as pool:
            left = dict(zip(self.servers, pool.map(
                lambda s: s["survivors"] if "survivors" in s else s["child"].kill(grace=10),
                self.servers.values())))
        if self.fork_server is not None:
            self.fork_server.close()
        self.record("teardown", None, survivors={k: v for k, v in left.items() if v},
                    stop_reason=self.stop_reason)
        self.sink.close()

    def manifest(self) -> dict:
        return {"note": NOTE, "argv": sys.argv, "deadline_s": self.opts.deadline_s,
                "points": self.opts.points, "fill": self.opts.fill, "pool": self.opts.pool,
                "in_turn": self.opts.in_turn, "sleep": self.opts.sleep,
                "fill_call": {"method": POISON_METHOD, "args": POISON_ARGS, "cls": POISON_CLS}
                if self.opts.fill else None,
                "fill_missing_why": None if self.opts.fill else _no_fill_why(self.opts),
                "wall_s": round(time.monotonic() - self.t0, 3), "stop_reason": self.stop_reason,
                "servers": {n: {"spec": asdict(s["spec"]), "port": s["port"],
                                "command": shlex.join(str(a) for a in s["argv"]),
                                "env": s["env"], **s["spec"].facts()}
                            for n, s in self.servers.items()}}


def run(opts: Options) -> int:
    r = Run(opts)

    def on_signal(signum, _frame):
        r.stop_reason = f"signal {signal.Signals(signum).name}"

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        for specs in [[s] for s in opts.servers] if opts.in_turn else [opts.servers]:
            if r.stop_reason:
                break
            r.start_all(specs)
            r.wait_healthy()
            names = {s.name for s in specs}
            asyncio.run(r.measure(names))
            if opts.in_turn:
                r.stop(names)
    except Exception as exc:     # a bug here must still leave the servers killed, the files
        import traceback
        r.stop_reason = f"driver error: {type(exc).__name__}: {exc}"
        r.record("driver_error", None, error=r.stop_reason, traceback=traceback.format_exc())
        traceback.print_exc()
    finally:
        r.teardown()
        (opts.out / "manifest.json").write_text(json.dumps(r.manifest(), indent=2, default=str))
        print(write_table(opts.out))
    return 0 if r.stop_reason is None else 1


def describe(opts: Options) -> None:
    print(f"# {NOTE}; deadline {opts.deadline_s:.0f} s, {opts.points} rounds per kind; state "
          f"fill: {'yes (' + POISON_CLS + ')' if opts.fill else 'no: the sleep cycle only'}"
          + ("; beside it the once-per-storage fill, the dirty restore and the copy bandwidth"
             if opts.pool else "") + ("; servers in turn" if opts.in_turn else "")
          + ("" if opts.sleep else "; no sleep cycles"))
    for spec in opts.servers:
        argv, env = server_command(opts, spec, 8000)
        facts = spec.facts()
        print(f"\n## {spec.name}: {facts['params']:,} params (~{facts['weights_gib_est']} GiB), "
              f"KV {spec.kv_gib:g} GiB, {spec.launcher}{' (boot only)' if spec.boot_only else ''}")
        print(" ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())) + " "
              + shlex.join(str(a) for a in argv).replace("8000", "{port}"))


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse_args(argv)
    except UserError as exc:
        print(f"gpu_cost_curve: error: {exc}", file=sys.stderr)
        return 2
    if isinstance(opts, Path):
        if not (opts / "records.jsonl").is_file():
            print(f"gpu_cost_curve: error: --summarize {opts}: no records.jsonl there",
                  file=sys.stderr)
            return 2
        print(write_table(opts))
        return 0
    describe(opts)
    if opts.dry_run:
        print("\nnothing started (--dry-run)")
        return 0
    return run(opts)


if __name__ == "__main__":
    sys.exit(main())
