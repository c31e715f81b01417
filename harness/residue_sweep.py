"""What runs next, and what one data point does.

Plans the data points (configuration × residue, each with its prompt), hands them to slot
workers through one shared queue (work stealing: a slow point never idles another slot),
and drives each point through its phases on its own server, streaming one record per
phase to the store as it completes. Process lifetime is ``server_pool``'s job.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import socket
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine.presets import ServingConfig

from . import __version__
from .client import (ClientError, EngineClient, RequestTimeout, ServerError, ServerGone, shared_http,
                     tok_per_step)
from .configs import SweepOptions, config_id, modulus_for, rerun_command, select_residues
from .engines import EngineAdapter, mismatches
from .prompts import ChatTokenizer, PlanError, PromptPlan, calibrate, plan_residue
from .scheduling import PointQueue
from .server_pool import BootFailure, PortAllocator, ServerProcess, Slot, log_excerpt
from .store import ResultStore, now_iso, read_jsonl, resolve_results
from .verdict import judge, sha1

WARMUP_MAX_TOKENS = 16
MAX_PORT_RETRIES = 3
BOOT_FAILURES_FRESH = 2   # boot failures of one configuration before its points are skipped


@dataclass
class Point:
    cfg: ServingConfig
    cfg_id: str
    residue: int
    modulus: int
    plan: PromptPlan
    rerun: str

    @property
    def key(self) -> tuple[str, int]:
        return (self.cfg_id, self.residue)


@dataclass
class SweepPlan:
    points: list[Point]
    sampled: dict[str, str | None]          # config_id -> note about left-out residues
    planning_s: float
    pad_unit: dict[str, str] = field(default_factory=dict)


class SweepAborted(RuntimeError):
    """The sweep could not run at all (exit code 3)."""


def source_digest(root: Path | None = None) -> str:
    """12 hex of a sha1 over the Python sources of ``harness/`` and ``engine/`` (relative
    path and bytes of each): which code ran, readable without git. A ``git archive``
    snapshot of a commit and that commit's checkout give the same digest."""
    root = root or Path(__file__).resolve().parent.parent
    h = hashlib.sha1()
    for path in sorted(p for d in ("harness", "engine") for p in (root / d).rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def harness_version() -> str:
    """``0.1.0+g<commit>[.dirty].src<digest>``. The commit is read only when the sources
    sit at the top of their own git checkout: a snapshot copied inside another checkout
    (the GPU runs' ``.gpu/src``) would otherwise report that checkout's HEAD. The source
    digest is there either way."""
    root = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(root)]
    try:
        top = subprocess.run(git + ["rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        ours = bool(top) and Path(top).resolve() == root
        sha = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip() if ours else ""
        dirty = subprocess.run(git + ["status", "--porcelain", "--", "harness", "engine"],
                               capture_output=True, text=True,
                               timeout=5).stdout.strip() if sha else ""
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", ""
    local = [f"g{sha}"] if sha else []
    if dirty:
        local.append("dirty")
    local.append(f"src{source_digest(root)}")
    return f"{__version__}+{'.'.join(local)}"


# -- planning ------------------------------------------------------------------------------
def plan_points(opts: SweepOptions, adapter: EngineAdapter,
                count_many_for: Callable[[ServingConfig], Callable] | None = None) -> SweepPlan:
    """Calibrate once per (tokenizer, context, modulus), then build every residue's prompt
    arithmetically. ``count_many_for`` supplies a counter for configurations without a
    local tokenizer (a probe server's /tokenize)."""
    t0 = time.monotonic()
    points: list[Point] = []
    sampled: dict[str, str | None] = {}
    pad_units: dict[str, str] = {}
    calibrations: dict[tuple, Any] = {}
    tokenizers: dict[Path, ChatTokenizer] = {}
    for cfg in opts.configs:
        cid = config_id(cfg)
        modulus = modulus_for(cfg, opts.modulus)
        residues, note = select_residues(opts.residues, cfg, modulus, seed=opts.seed)
        sampled[cid] = note
        tdir = adapter.tokenizer_dir(cfg)
        if tdir is not None:
            if tdir not in tokenizers:
                tokenizers[tdir] = ChatTokenizer.from_dir(tdir)
            counter = tokenizers[tdir].count_many
            line_counts = tokenizers[tdir].line_token_counts
            key: tuple = (str(tdir), opts.context, modulus)
        elif count_many_for is not None:
            counter = count_many_for(cfg)
            line_counts = None
            key = ("remote", cid, opts.context, modulus)
        else:
            raise SweepAborted(f"no local tokenizer for {cfg.label()} and no server to ask: "
                               "give --model DIR with tokenizer.json")
        need = opts.context + modulus + opts.max_tokens
        if need > cfg.max_model_len:
            raise PlanError(f"--context {opts.context} + modulus {modulus} + --max-tokens "
                            f"{opts.max_tokens} exceeds max_model_len {cfg.max_model_len} "
                            f"of {cfg.label()}")
        if key not in calibrations:
            calibrations[key] = calibrate(counter, opts.context, modulus,
                                          answer_lines=opts.answer_lines, seed=opts.seed,
                                          line_counts=line_counts)
        cal = calibrations[key]
        pad_units[cid] = cal.pad_unit
        for r in residues:
            points.append(Point(cfg, cid, r, modulus, plan_residue(cal, r, modulus),
                                rerun_command(opts, cfg, r, modulus)))
    return SweepPlan(points, sampled, time.monotonic() - t0, pad_units)


class RemoteCounter:
    """Templated lengths from a probe server's ``/tokenize`` (for engines without a local
    tokenizer): the planner's ``count_many`` over HTTP."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None):
        import httpx
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=120,
                                  trust_env=False)
        self.model = model

    def __call__(self, conversations) -> list[int]:
        out = []
        for messages in conversations:
            resp = self._http.post("/tokenize", json={"model": self.model,
                                                      "messages": list(messages),
                                                      "add_generation_prompt": True})
            if resp.status_code in (404, 405, 501):
                raise SweepAborted("the server has no /tokenize and there is no local "
                                   "tokenizer: give --model DIR with tokenizer.json")
            resp.raise_for_status()
            data = resp.json()
            out.append(int(data["count"]) if "count" in data else len(data["tokens"]))
        return out

    def close(self) -> None:
        self._http.close()


async def plan_with_probes(opts: SweepOptions, adapter: EngineAdapter, *, run_id: str,
                           logs_dir: Path) -> SweepPlan:
    """Plan every point; configurations without a local tokenizer are planned against a
    probe server of that configuration (booted, asked, stopped)."""
    need = [c for c in opts.configs if adapter.tokenizer_dir(c) is None]
    if not need:
        return await asyncio.to_thread(plan_points, opts, adapter)
    runner = PointRunner(opts, adapter, run_id=run_id, logs_dir=logs_dir)
    counters: dict[str, RemoteCounter] = {}
    probes = []
    try:
        for cfg in need:
            try:
                server, client, info = await runner.boot_config(cfg, opts.slots[0],
                                                                f"{config_id(cfg)}-probe")
            except BootFailure as e:
                raise SweepAborted(f"probe server for planning did not boot: {e.reason}") from None
            probes.append((server, client))
            await runner.settle(info)
            model = runner.model_name(cfg) or info.get("model") or cfg.model or "default"
            counters[config_id(cfg)] = RemoteCounter(server.base_url, model, opts.api_key)
        return await asyncio.to_thread(plan_points, opts, adapter,
                                       lambda cfg: counters[config_id(cfg)])
    finally:
        for c in counters.values():
            c.close()
        for server, client in probes:
            await runner.stop(server, client)


def load_golden(run_ref: str, out_dir: Path) -> dict[tuple, str]:
    """The correct answer's sha1 per prompt, from a reference run (typically a trusted
    configuration: no speculative decoding, no FULL graphs, or a known-good build).

    A prompt is identified by (residue, templated length): the same context and seed give
    the same document and the same lengths whatever the configuration. A prompt whose ok
    records disagree in the reference run has no golden answer (it is left out)."""
    seen: dict[tuple, set[str]] = {}
    for r in read_jsonl(resolve_results(run_ref, out_dir)):
        if r.get("verdict") == "ok" and r.get("sha1"):
            seen.setdefault((r["residue"], r["target_len"]), set()).add(r["sha1"])
    golden = {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}
    if not golden:
        raise SweepAborted(f"golden run {run_ref}: no ok records to take reference sha1s from")
    return golden


# -- running -------------------------------------------------------------------------------
@dataclass
class Counters:
    total_points: int
    points_done: int = 0
    verdicts: Counter = field(default_factory=Counter)
    timings: list[dict[str, float]] = field(default_factory=list)


class PointRunner:
    """The per-point code, shared by every backend: boot a server for a point on a slot,
    run its phases (each record handed to ``emit`` as it completes), stop the server.
    A backend only decides *where* this runs (local slots here, Ray tasks elsewhere)."""

    def __init__(self, opts: SweepOptions, adapter: EngineAdapter, *, run_id: str,
                 logs_dir: Path, golden: dict[tuple, str] | None = None,
                 http=None, version: str | None = None):
        self.opts = opts
        self.adapter = adapter
        self.run_id = run_id
        self.logs_dir = logs_dir
        self.golden = golden or {}
        self.ports = PortAllocator()
        self.node = socket.gethostname()
        self.version = version or harness_version()
        self.http = http

    async def run_fresh(self, point: Point, slot: Slot,
                        emit: Callable[[dict], None]) -> tuple[list[dict], dict[str, float]]:
        """One whole data point on its own fresh server: boot, phases, teardown."""
        t_point = time.monotonic()
        timing = {"boot": 0.0, "requests": 0.0, "teardown": 0.0}
        try:
            server, client, info = await self.boot(point, slot)
        except BootFailure as e:
            records = self.boot_fail_records(point, slot, e)
            for r in records:
                emit(r)
            timing["boot"] = time.monotonic() - t_point
            timing["point"] = time.monotonic() - t_point
            return records, timing
        timing["boot"] = server.boot_s or 0.0
        try:
            t_req = time.monotonic()
            records, _ = await self.run_phases(point, slot, server, client, info, emit)
            timing["requests"] = time.monotonic() - t_req
            timing["point"] = time.monotonic() - t_point
        finally:
            await self.stop(server, client, timing=timing)
        return records, timing

    def boot_fail_records(self, point: Point, slot: Slot, e: BootFailure) -> list[dict]:
        return [self._failure_record(point, slot, phase, "boot-fail", e.reason,
                                     e.log_excerpt, {}, None) for phase in self.opts.phases]

    async def boot(self, point: Point, slot: Slot) -> tuple[ServerProcess, EngineClient, dict]:
        return await self.boot_config(point.cfg, slot, f"{point.cfg_id}-r{point.residue:03d}")

    async def boot_config(self, cfg: ServingConfig, slot: Slot,
                          log_name: str) -> tuple[ServerProcess, EngineClient, dict]:
        """Start a server for ``cfg`` on ``slot`` and wait until it is ready; a port taken
        by another program between our pick and its bind is retried on a new port."""
        last: BootFailure | None = None
        for _ in range(MAX_PORT_RETRIES):
            port = self.ports.acquire()
            argv, env = self.adapter.command(cfg, port, slot)
            if slot.gpu is not None:
                env = {"CUDA_VISIBLE_DEVICES": slot.gpu, **env}
            log_path = self.logs_dir / f"{log_name}-{slot.id}-{port}.log"
            server = ServerProcess(argv, env, port, log_path, slot)
            client = EngineClient(server.base_url, timeout=self.opts.timeout,
                                  api_key=self.opts.api_key, http=self.http)
            try:
                server.start()
                await server.wait_ready(client, self.opts.boot_timeout)
                info: dict[str, Any] = {"boot_s": round(server.boot_s or 0.0, 4)}
                # What the server says it runs is read while the first requests go out
                # (it is needed for the records, not for the requests), unless the model
                # name to put in the requests can only come from the server.
                info["_probe"] = asyncio.create_task(self._probe(info, client, cfg, log_path))
                if not self.model_name(cfg):
                    await self.settle(info)
                return server, client, info
            except BootFailure as e:
                last = e
                await self.stop(server, client, port)
                if not e.port_conflict:
                    raise
            except BaseException:
                await self.stop(server, client, port)
                raise
        assert last is not None
        raise last

    async def _probe(self, info: dict, client: EngineClient, cfg: ServingConfig,
                     log_path: Path) -> None:
        try:
            info.update(await self.adapter.effective(client, cfg, _read(log_path)))
        except ClientError as e:  # a server that dies now shows up in the first request
            info["probe_error"] = str(e)

    @staticmethod
    async def settle(info: dict) -> dict:
        """Wait for the effective-configuration probe started at boot, if still running."""
        task = info.pop("_probe", None)
        if task is not None:
            await task
        return info

    def model_name(self, cfg: ServingConfig) -> str | None:
        return self.opts.served_model_name or self.adapter.model_name(cfg)

    async def stop(self, server: ServerProcess | None, client: EngineClient | None,
                    port: int | None = None, *, timing: dict[str, float] | None = None) -> None:
        if client is not None:
            await client.aclose()
        if server is not None:
            try:
                took = await asyncio.shield(server.stop())
                if timing is not None:
                    timing["teardown"] = timing.get("teardown", 0.0) + took
            finally:
                self.ports.release(server.port)
        elif port is not None:
            self.ports.release(port)

    # -- one data point ----------------------------------------------------------------
    async def run_phases(self, point: Point, slot: Slot, server: ServerProcess,
                         client: EngineClient, info: dict,
                         emit: Callable[[dict], None]) -> tuple[list[dict], bool]:
        opts = self.opts
        model = self.model_name(point.cfg) or info.get("model") or point.cfg.model or "default"
        records: list[dict] = []
        templated: int | None = None
        tokenize_error: str | None = None
        try:
            templated, _ = await asyncio.gather(client.tokenize(point.plan.messages, model),
                                                self.settle(info))
        except (ServerGone, RequestTimeout, ServerError) as e:
            tokenize_error = str(e)
            await self.settle(info)
        cold_sha1: str | None = None
        dead_reason: tuple[str, str, list[str]] | None = None
        for phase in opts.phases:
            if dead_reason is not None:
                verdict, why, excerpt = dead_reason
                rec = self._failure_record(point, slot, phase, verdict,
                                           f"{why} (in an earlier phase)", excerpt, info, templated)
                records.append(rec)
                emit(rec)
                continue
            try:
                if phase == "warm":
                    await client.chat(point.plan.warmup_messages, model=model,
                                      max_tokens=WARMUP_MAX_TOKENS, seed=opts.seed)
                before = await client.spec_counters()
                res = await client.chat(point.plan.messages, model=model,
                                        max_tokens=opts.max_tokens, seed=opts.seed)
                after = await client.spec_counters()
            except RequestTimeout as e:
                dead_reason = ("timeout", str(e), log_excerpt(server.log_path))
                rec = self._failure_record(point, slot, phase, "timeout", str(e),
                                           dead_reason[2], info, templated)
            except (ServerGone, ServerError) as e:
                alive = await _still_alive(server)
                if isinstance(e, ServerError) and 400 <= e.status < 500 and alive:
                    rec = self._failure_record(point, slot, phase, "invalid",
                                               f"server rejected the request: {e}", [], info,
                                               templated)
                else:
                    why = f"{e}; server process {'alive' if alive else 'dead'}"
                    excerpt = log_excerpt(server.log_path)
                    dead_reason = ("crash", why, excerpt)
                    rec = self._failure_record(point, slot, phase, "crash", why, excerpt,
                                               info, templated)
            else:
                rec = self._judged_record(point, slot, phase, res, tok_per_step(before, after),
                                          info, templated, tokenize_error, cold_sha1)
                if phase == "cold":
                    cold_sha1 = rec["sha1"]
            records.append(rec)
            emit(rec)
        return records, dead_reason is not None

    # -- records -----------------------------------------------------------------------
    def _base_record(self, point: Point, slot: Slot, phase: str, info: dict,
                     templated: int | None) -> dict[str, Any]:
        requested = point.cfg.as_dict()
        effective = info.get("config") or requested
        return {
            "run_id": self.run_id, "harness_version": self.version,
            "config_id": point.cfg_id, "config_label": point.cfg.label(),
            "config": effective, "requested_config": requested,
            "config_mismatch": mismatches(requested, effective),
            "engine": point.cfg.engine, "engine_version": info.get("engine_version"),
            "patches": point.cfg.patches, "patch_status": info.get("patch_status"),
            "model": info.get("model") or point.cfg.model, "slot": slot.id, "node": self.node,
            "isolation": self.opts.isolation, "residue": point.residue,
            "modulus": point.modulus, "target_len": point.plan.target_len,
            "templated_len": templated if templated is not None else point.plan.target_len,
            "templated_len_source": "server /tokenize" if templated is not None else "local tokenizer",
            "phase": phase, "reference": self.opts.reference,
            "boot_s": info.get("boot_s"), "started_at": now_iso(), "rerun": point.rerun,
        }

    def _failure_record(self, point, slot, phase, verdict, reason, excerpt, info, templated):
        rec = self._base_record(point, slot, phase, info, templated)
        rec.update({"prompt_tokens": None, "cached_tokens": None, "computed_tail": None,
                    "answer": "", "content_was_null": False, "sha1": None,
                    "reference_sha1": None, "expected_chars": len(point.plan.expected),
                    "verbatim_n": 0, "verbatim_total": 0, "repeats": 0, "finish_reason": None,
                    "completion_tokens": None, "tok_per_step": None, "latency_s": None,
                    "verdict": verdict, "reason": reason, "log_excerpt": excerpt})
        return rec

    def _reference_sha1(self, point: Point, phase: str, cold_sha1: str | None) -> tuple[str | None, str | None]:
        """(expected passage or None, reference sha1 or None) for this phase."""
        ref = self.opts.reference
        if ref == "passage":
            return point.plan.expected, None
        if ref == "cold":
            return None, (cold_sha1 if phase != "cold" else None)
        sha = self.golden.get((point.residue, point.plan.target_len))
        # A prompt the golden run did not answer (another context or seed) falls back to
        # the passage; the record's reference_sha1 says which was used.
        return (None, sha) if sha else (point.plan.expected, None)

    def _judged_record(self, point, slot, phase, res, tps, info, templated, tokenize_error,
                       cold_sha1) -> dict[str, Any]:
        rec = self._base_record(point, slot, phase, info, templated)
        expected, ref_sha1 = self._reference_sha1(point, phase, cold_sha1)
        j = judge(res.answer, source=point.plan.document, expected=expected,
                  reference_sha1=ref_sha1, finish_reason=res.finish_reason)
        verdict, reason = j.verdict, j.reason
        invalid = self._invalid_reason(point, phase, res, templated, info)
        if invalid:
            verdict, reason = "invalid", f"{invalid} (answer judged {j.verdict}: {j.reason})"
        cached = res.cached_tokens
        rec.update({
            "prompt_tokens": res.prompt_tokens, "cached_tokens": cached,
            "computed_tail": (res.prompt_tokens - cached) if (cached is not None and
                                                               res.prompt_tokens is not None) else None,
            "answer": res.answer, "content_was_null": res.content_was_null, "sha1": j.sha1,
            "reference_sha1": ref_sha1 if ref_sha1 else (
                sha1(expected) if expected is not None else None),
            "expected_chars": len(point.plan.expected), "verbatim_n": j.verbatim_n,
            "verbatim_total": j.verbatim_total, "repeats": j.repeats,
            "finish_reason": res.finish_reason, "completion_tokens": res.completion_tokens,
            "tok_per_step": tps, "latency_s": round(res.latency_s, 4), "verdict": verdict,
            "reason": reason, "log_excerpt": [],
        })
        if tokenize_error:
            rec["tokenize_error"] = tokenize_error
        return rec

    def _invalid_reason(self, point: Point, phase: str, res, templated: int | None,
                        info: dict) -> str | None:
        target = point.plan.target_len
        if templated is not None and templated != target:
            return f"templated length {templated} by the server's /tokenize, target {target}"
        if res.prompt_tokens is not None and res.prompt_tokens != target:
            return f"usage.prompt_tokens {res.prompt_tokens} != target {target}"
        cached = res.cached_tokens
        if cached is None:
            return None
        if phase == "cold" and cached > 0:
            why = (f"cold request hit the cache ({cached} tokens): "
                   f"{self.opts.isolation} isolation not proven")
            if info.get("reset_error"):
                why += f"; /reset_prefix_cache failed: {info['reset_error']}"
            return why
        if phase != "cold" and point.cfg.prefix_caching and cached == 0:
            return f"{phase}: no prefix-cache hit (cached_tokens 0)"
        return None



class Sweep:
    """Drives planned points through slot workers; records stream into ``store``."""

    def __init__(self, opts: SweepOptions, adapter: EngineAdapter, store: ResultStore,
                 plan: SweepPlan, *, on_point_done: Callable[[Point, list[dict]], None] | None = None,
                 golden: dict[tuple, str] | None = None):
        self.opts = opts
        self.store = store
        self.plan = plan
        self.on_point_done = on_point_done
        self.runner = PointRunner(opts, adapter, run_id=store.run_id, logs_dir=store.logs_dir,
                                  golden=golden)
        self.counters = Counters(total_points=len(plan.points))
        self._teardowns: set[asyncio.Task] = set()
        self._boot_failures: Counter = Counter()

    async def run(self, points: list[Point]) -> Counters:
        if self.opts.backend == "ray":
            # Same per-point code (PointRunner.run_fresh), run as Ray tasks; records come
            # back here and are written by this process only.
            from .backends.ray_backend import run_on_ray
            await run_on_ray(self, points)
            return self.counters
        self.runner.http = shared_http()
        try:
            return await self._run(points)
        finally:
            await self.runner.http.aclose()

    async def _run(self, points: list[Point]) -> Counters:
        queue = PointQueue(points, affinity=self.opts.isolation != "fresh")
        workers = [asyncio.create_task(self._worker(slot, queue), name=f"slot-{slot.id}")
                   for slot in self.opts.slots]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if self._teardowns:
                await asyncio.gather(*self._teardowns, return_exceptions=True)
        return self.counters

    # -- one slot ----------------------------------------------------------------------
    async def _worker(self, slot: Slot, queue: PointQueue) -> None:
        server: ServerProcess | None = None
        client: EngineClient | None = None
        server_cfg: str | None = None
        server_timing: dict[str, float] | None = None
        info: dict[str, Any] = {}
        try:
            while (point := queue.next(slot.id, server_cfg)) is not None:
                t_point = time.monotonic()
                timing = {"boot": 0.0, "requests": 0.0, "teardown": 0.0}
                reuse = (self.opts.isolation != "fresh" and server is not None
                         and server_cfg == point.cfg_id and server.tree_alive())
                if not reuse:
                    if server is not None:
                        self._background_stop(server, client, server_timing)
                        server = client = None
                    try:
                        server, client, info = await self.runner.boot(point, slot)
                        server_cfg, server_timing = point.cfg_id, timing
                        timing["boot"] = server.boot_s or 0.0
                    except BootFailure as e:
                        self._emit_point(point, self.runner.boot_fail_records(point, slot, e))
                        timing["boot"] = time.monotonic() - t_point
                        self._timing(t_point, timing)
                        self._after_boot_failure(point, slot, e, queue)
                        continue
                elif self.opts.isolation == "reset":
                    try:
                        await client.reset_prefix_cache()  # type: ignore[union-attr]
                        info.pop("reset_error", None)
                    except ClientError as e:  # the next cold request proves it or not
                        info["reset_error"] = str(e)
                t_req = time.monotonic()
                records, server_dead = await self.runner.run_phases(
                    point, slot, server, client, info, self.store.append)
                self._count(point, records)
                timing["requests"] = time.monotonic() - t_req
                if self.opts.isolation == "fresh" or server_dead:
                    # Teardown overlaps the next boot on this slot; its time is filled in
                    # when it finishes.
                    self._background_stop(server, client, timing)
                    server = client = None
                    server_cfg = None
                self._timing(t_point, timing)
                # What the queue weighs a new server against before it helps with a
                # configuration another slot serves.
                queue.observe(point.cfg_id, boot=None if reuse else timing["boot"],
                              point=timing["point"] - timing["boot"])
        finally:
            if server is not None:
                await self.runner.stop(server, client, timing=server_timing)

    def _after_boot_failure(self, point: Point, slot: Slot, e: BootFailure,
                            queue: PointQueue) -> None:
        """A configuration that keeps failing to boot is not booted again for every
        remaining residue (a minute or more each on a GPU): its remaining points are
        recorded as boot-fail, naming the failure. Fresh isolation allows one retry on the
        next point (a boot can fail for a passing reason); reset/shared allow none."""
        self._boot_failures[point.cfg_id] += 1
        allowed = BOOT_FAILURES_FRESH if self.opts.isolation == "fresh" else 1
        if self._boot_failures[point.cfg_id] < allowed:
            return
        for rest in queue.drain(point.cfg_id):
            why = BootFailure(f"not started: this configuration failed to boot "
                              f"{self._boot_failures[point.cfg_id]}x (last: {e.reason})",
                              e.log_excerpt)
            self._emit_point(rest, self.runner.boot_fail_records(rest, slot, why))

    def _timing(self, t_point: float, timing: dict[str, float]) -> None:
        """Per point: boot, requests, teardown (filled in later when it runs in the
        background) and the point's wall time on its slot, teardown excluded."""
        timing["point"] = time.monotonic() - t_point
        self.counters.timings.append(timing)

    def _background_stop(self, server, client, timing: dict[str, float] | None = None) -> None:
        task = asyncio.create_task(self.runner.stop(server, client, timing=timing))
        self._teardowns.add(task)
        task.add_done_callback(self._teardowns.discard)

    def _emit_point(self, point: Point, records: list[dict]) -> None:
        for rec in records:
            self.store.append(rec)
        self._count(point, records)

    def _count(self, point: Point, records: list[dict]) -> None:
        self.counters.points_done += 1
        for r in records:
            self.counters.verdicts[r["verdict"]] += 1
        if self.on_point_done:
            self.on_point_done(point, records)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


async def _still_alive(server: ServerProcess) -> bool:
    """Death is judged by the process tree, not /health (vLLM has answered 200 on /health
    after its engine core died, vllm-project/vllm#21443). Give a dying process a moment."""
    for _ in range(10):
        if not server.tree_alive():
            return False
        await asyncio.sleep(0.05)
    return server.tree_alive()


def timing_summary(timings: list[dict[str, float]], slots: int, wall: float) -> dict[str, float]:
    """Where the wall time went: medians per point, and how busy the slots were.

    ``efficiency`` = Σ(boot + requests + teardown) / (slots × wall): 1.0 means the harness
    added nothing to the irreducible cost and no slot ever idled."""
    import statistics
    if not timings or wall <= 0:
        return {}
    med = {k: statistics.median(t.get(k, 0.0) for t in timings)
           for k in ("boot", "requests", "teardown", "point")}
    busy = sum(t.get("boot", 0.0) + t.get("requests", 0.0) + t.get("teardown", 0.0)
               for t in timings)
    overhead = [max(0.0, t.get("point", 0.0) - t.get("boot", 0.0) - t.get("requests", 0.0))
                for t in timings]
    return {
        "points": len(timings), "slots": slots, "wall_s": round(wall, 3),
        "median_boot_s": round(med["boot"], 4), "median_requests_s": round(med["requests"], 4),
        "median_teardown_s": round(med["teardown"], 4),
        "median_point_s": round(med["point"], 4),
        "median_overhead_s": round(statistics.median(overhead), 4),
        "sum_boot_s": round(sum(t.get("boot", 0.0) for t in timings), 3),
        "sum_requests_s": round(sum(t.get("requests", 0.0) for t in timings), 3),
        "sum_teardown_s": round(sum(t.get("teardown", 0.0) for t in timings), 3),
        "efficiency": round(busy / (slots * wall), 4),
        "overhead_fraction": round(sum(overhead) / (slots * wall), 4),
    }
