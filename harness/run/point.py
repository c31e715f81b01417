"""One data point: boot its server, run its phases, stop the server.

``PointRunner`` is the per-point code every backend runs (local slots, Ray tasks). It is
given a *launcher* (how a server process is started: ``server_pool.ServerProcess`` by
default) and an ``httpx.AsyncClient`` (every request of every point goes through it), so
tests drive it in-process: a fake launcher and an ``httpx.MockTransport`` stand in for
the server. It writes nothing: records go to ``emit`` as each phase completes and the
backend hands the finished point to the driver.
"""
from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import httpx

from engine.presets import ServingConfig

from ..serve.client import (BadResponse, ClientError, EngineClient, RequestTimeout, ServerError,
                            ServerGone, tok_per_step)
from ..serve import poison
from ..serve.gpu_info import gpu_record
from ..settings.sweep_options import SweepOptions
from ..serve.engines import EngineAdapter
from ..serve.facts import ServerFacts
from ..provenance import harness_version
from ..server_pool import (BootFailure, PortAllocator, ServerProcess, Slot, attempts_said,
                           log_excerpt)
from ..judge.verdict import judge
from ..names.verdict import CLEAN, NOT_LONE
from ..names.phase import PhaseName
from .load import (BackgroundLoad, LoadError, beside_from_log, load_facts, preempted_in_log,
                   server_gauges)
from .history import HistoryRun, drives, pool_tokens, run_history
from .plan import Point
from .record_builder import RecordBuilder, timing_record
from ..records.phase_record import PhaseRecord
from .phase_judge import (control_reference, invalid_reason, measured_fields, not_lone,
                          reference_of)
from .prompt_logprobs import canonical, compared
from .traffic import traffic_facts

__all__ = ["PointRunner", "PointResult", "RunnerSpec", "Launcher", "Server",
           "WARMUP_MAX_TOKENS", "MAX_PORT_RETRIES", "BOOT_ATTEMPTS"]

WARMUP_MAX_TOKENS = 16
MAX_PORT_RETRIES = 3
# Boots tried for one point before it is recorded boot-fail (and counts towards its
# configuration's allowance, harness/serve/isolation.py): a server that exited during boot is
# started once more, after the failed one is stopped. On the H200 vLLM boots failed
# transiently beside other booting servers, and one failure voided a whole reset pass
# (issue 33 item 8). A boot that timed out is not retried (it already waited its timeout).
BOOT_ATTEMPTS = 2
Emit = Callable[[PhaseRecord], None]


class Server(Protocol):
    """What the runner needs of a started server (``server_pool.ServerProcess``)."""

    port: int
    log_path: Path
    boot_s: float | None

    @property
    def base_url(self) -> str: ...
    async def prepare(self) -> None: ...
    def start(self) -> None: ...
    async def wait_ready(self, client: EngineClient, timeout: float) -> float: ...
    async def stop(self) -> float: ...
    def tree_alive(self) -> bool: ...


Launcher = Callable[[list, dict, int, Path, Slot], Server]


@dataclass
class PointResult:
    records: list[PhaseRecord]
    timing: dict[str, float]


@dataclass(frozen=True)
class RunnerSpec:
    """Everything a ``PointRunner`` is built from, picklable (Ray ships it to the nodes)."""

    opts: SweepOptions
    adapter: EngineAdapter
    run_id: str
    version: str
    golden: dict = field(default_factory=dict)
    # --launcher prefork: the run's pre-imported launcher (local backend only; not shipped)
    launcher: Any = field(default=None, compare=False)

    def make(self, logs_dir: Path, http: httpx.AsyncClient, *, node: str | None = None,
             launcher: Launcher | None = None) -> "PointRunner":
        return PointRunner(self.opts, self.adapter, run_id=self.run_id, logs_dir=logs_dir,
                           golden=self.golden, http=http, version=self.version, node=node,
                           launcher=launcher or self.launcher or ServerProcess)


class PointRunner:
    """Boot a server for a point on a slot, run its phases, stop the server."""

    def __init__(self, opts: SweepOptions, adapter: EngineAdapter, *, run_id: str,
                 logs_dir: Path, http: httpx.AsyncClient, golden: dict | None = None,
                 version: str | None = None, node: str | None = None,
                 launcher: Launcher = ServerProcess):
        self.opts = opts
        self.adapter = adapter
        self.logs_dir = logs_dir
        self.golden = golden or {}
        self.http = http
        self.launcher = launcher
        self.ports = PortAllocator()
        self.node = node or socket.gethostname()
        self._cold_plp: dict = {}   # --prompt-logprobs: the cold phase's, per point
        # the effective-configuration reads still running, per server's facts (by identity:
        # the facts are held here too, so the id is not reused while the read is pending)
        self._probes: dict[int, tuple[ServerFacts, asyncio.Task]] = {}
        self.records = RecordBuilder(run_id, version or harness_version(), opts.running.isolation,
                                     opts.measure.reference, tuple(opts.measure.phases))

    # -- a whole point -----------------------------------------------------------------
    async def run_fresh(self, point: Point, slot: Slot, emit: Emit | None = None) -> PointResult:
        """One whole data point on its own fresh server: boot, phases, teardown."""
        emit = emit or (lambda rec: None)
        t_point = time.monotonic()
        timing = timing_record()
        try:
            server, client, info = await self.boot(point, slot)
        except BootFailure as e:
            records = self.boot_fail_records(point, slot, e)
            for r in records:
                emit(r)
            timing["boot"] = time.monotonic() - t_point
            timing["point"] = time.monotonic() - t_point
            return PointResult(records, timing)
        timing["boot"] = server.boot_s or 0.0
        try:
            t_req = time.monotonic()
            records, _ = await self.run_phases(point, slot, server, client, info, emit)
            timing["requests"] = time.monotonic() - t_req
            timing["point"] = time.monotonic() - t_point
        finally:
            await self.stop(server, client, timing=timing)
        return PointResult(records, timing)

    def boot_fail_records(self, point: Point, slot: Slot, e: BootFailure
                          ) -> list[PhaseRecord]:
        return self.records.failures(point, slot.id, self.node, "boot-fail", e.reason,
                                     e.log_excerpt,
                                     {"server_boot": {"attempts": e.attempts}})

    # -- servers -----------------------------------------------------------------------
    async def boot(self, point: Point, slot: Slot, *, timeout: float | None = None
                   ) -> tuple[Server, EngineClient, ServerFacts]:
        case = f"-{point.case}" if point.case else ""
        # a restore point's server starts in sleep mode, a fresh one plain (for_isolation)
        adapter = self.adapter.for_isolation(point.isolation or self.opts.running.isolation)
        failed: list[str] = []
        while True:
            try:
                server, client, info = await self.boot_config(
                    point.cfg, slot, f"{point.cfg_id}{case}-r{point.residue:03d}", adapter,
                    timeout=timeout)
            except BootFailure as e:
                failed.append(e.reason)
                if e.retryable and len(failed) < BOOT_ATTEMPTS:
                    continue
                raise BootFailure(attempts_said(e.reason, failed), e.log_excerpt,
                                  port_conflict=e.port_conflict, retryable=e.retryable,
                                  attempts=len(failed)) from None
            if failed:   # the record says the boot needed more than one try, and why
                info.server_boot["attempts"] = len(failed) + 1
                info.server_boot["failed_attempts"] = failed
            return server, client, info

    async def boot_config(self, cfg: ServingConfig, slot: Slot, log_name: str,
                          adapter: EngineAdapter | None = None, *,
                          timeout: float | None = None) -> tuple[Server, EngineClient, ServerFacts]:
        """Start a server for ``cfg`` on ``slot`` and wait until it is ready; a port taken
        by another program between our pick and its bind is retried on a new port."""
        last: BootFailure | None = None
        for _ in range(MAX_PORT_RETRIES):
            port = self.ports.acquire()
            argv, env = (adapter or self.adapter).command(cfg, port, slot)
            if slot.gpu is not None:
                env = {"CUDA_VISIBLE_DEVICES": slot.gpu, **env}
            log_path = self.logs_dir / f"{log_name}-{slot.id}-{port}.log"
            server = self.launcher(argv, env, port, log_path, slot)
            client = EngineClient(server.base_url, timeout=self.opts.running.timeout,
                                  api_key=self.opts.running.api_key, http=self.http,
                                  reset_path=(adapter or self.adapter).reset_path)
            try:
                await server.prepare()
                server.start()
                await server.wait_ready(client, timeout or self.opts.running.boot_timeout)
                info = ServerFacts(boot_s=round(server.boot_s or 0.0, 4),
                                   server_boot=self._boot_notes(server, log_path))
                if slot.gpu is not None:   # issue 48: the GPU, as the driver names it,
                    boot = info.server_boot   # and the fingerprint bound to it
                    boot["gpu"] = gpu_record(slot.gpu)
                    boot["compile"] = (adapter or self.adapter).bind_compile(
                        boot.get("compile"), [g.get("model") for g in boot["gpu"] or []], env)
                # --poison: filled before its first request (harness/serve/poison.py)
                served = adapter or self.adapter
                info.poison = (await poison.at_boot(client, served.poison_kernels())
                               if served.poison else poison.off_record(self.opts.serving.poison))
                info.fill_restores = bool(served.poison and served.fill_restores)
                # What the server says it runs is read while the first requests go out
                # (it is needed for the records, not for the requests), unless the model
                # name to put in the requests can only come from the server.
                self._probes[id(info)] = (
                    info, asyncio.create_task(self._probe(info, client, cfg, log_path)))
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

    def _boot_notes(self, server: Server, log_path: Path) -> dict[str, Any]:
        """How this server booted: launcher (and why not forked), the engine's reading of
        its log (vLLM: boot split, compile cache hit/miss), for the records and the
        manifest's boot split."""
        notes: dict[str, Any] = {"log": log_path.name,
                                 "launcher": getattr(server, "how", "plain"),
                                 "boot_s": round(server.boot_s or 0.0, 4)}
        if getattr(server, "fallback_reason", None):
            notes["fallback_reason"] = server.fallback_reason
        if getattr(server, "env_differs", ()):   # forked with these differing from the parent
            notes["env_differs"] = list(server.env_differs)
        try:
            notes.update(self.adapter.boot_notes(
                _read(log_path), started_epoch=getattr(server, "started_epoch", None),
                ready_epoch=getattr(server, "ready_epoch", None)))
        except Exception as e:   # a log we cannot read is recorded, not fatal
            notes["boot_log_error"] = f"{type(e).__name__}: {e}"
        return notes

    async def _probe(self, info: ServerFacts, client: EngineClient, cfg: ServingConfig,
                     log_path: Path) -> None:
        try:
            info.learn(await self.adapter.effective(client, cfg, _read(log_path)))
        except ClientError as e:  # a server that dies now shows up in the first request
            info.probe_error = str(e)

    async def settle(self, info: ServerFacts) -> ServerFacts:
        """Wait for the effective-configuration probe started at boot, if still running."""
        _, task = self._probes.pop(id(info), (None, None))
        if task is not None:
            await task
        return info

    def model_name(self, cfg: ServingConfig) -> str | None:
        return self.opts.serving.served_model_name or self.adapter.model_name(cfg)

    async def stop(self, server: Server | None, client: EngineClient | None,
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

    # -- the phases of one point -------------------------------------------------------
    async def run_phases(self, point: Point, slot: Slot, server: Server,
                         client: EngineClient, info: ServerFacts,
                         emit: Emit | None = None) -> tuple[list[PhaseRecord], bool]:
        """Every requested phase on a booted server; (records, server died)."""
        emit = emit or (lambda rec: None)
        model = self.model_name(point.cfg) or info.model or point.cfg.model or "default"
        records: list[PhaseRecord] = []
        templated: int | None = None
        tokenize_error: str | None = None
        try:
            templated, _ = await asyncio.gather(client.tokenize(point.plan.messages, model),
                                                self.settle(info))
        except (ServerGone, RequestTimeout, ServerError) as e:
            tokenize_error = str(e)
            await self.settle(info)
        cold: PhaseRecord | None = None
        dead: tuple[str, str, list[str]] | None = None
        for phase in self.opts.measure.phases:
            if dead is not None:
                verdict, why, excerpt = dead
                rec = self._failure(point, slot, phase, verdict, f"{why} (in an earlier phase)",
                                    excerpt, info, templated)
            else:
                rec, dead = await self._phase(point, slot, phase, server, client, info, model,
                                              templated, tokenize_error, cold)
                if phase == PhaseName.COLD:
                    cold = rec
            records.append(rec)
            emit(rec)
        return records, dead is not None

    async def _phase(self, point: Point, slot: Slot, phase: str, server: Server,
                     client: EngineClient, info: ServerFacts, model: str, templated: int | None,
                     tokenize_error: str | None, cold: PhaseRecord | None):
        """One phase's record, and (verdict, why, log) when the server is gone."""
        try:
            if phase == PhaseName.WARM:
                await client.chat(point.plan.warmup_messages, model=model,
                                  max_tokens=WARMUP_MAX_TOKENS, seed=point.document_seed)
            before = await client.scrape()
            res, load, hist = await self._measured(point, phase, client, model, server,
                                                   templated)
            res = self.adapter.read_usage(res, info.config or {})   # SGLang's 0 hits
            after = await client.scrape()
        except LoadError as e:
            return self._failure(point, slot, phase, "invalid", f"--load: {e}", [], info,
                                 templated), None
        except RequestTimeout as e:
            dead = ("timeout", str(e), log_excerpt(server.log_path))
            return self._failure(point, slot, phase, "timeout", str(e), dead[2], info,
                                 templated), dead
        except (ServerGone, ServerError, BadResponse) as e:
            alive = await _still_alive(server)
            if isinstance(e, ServerError) and 400 <= e.status < 500 and alive:
                return self._failure(point, slot, phase, "invalid",
                                     f"server rejected the request: {e}", [], info,
                                     templated), None
            if isinstance(e, BadResponse) and alive:
                return self._failure(point, slot, phase, "invalid",
                                     f"malformed answer: {e}", [], info, templated), None
            why = f"{e}; server process {'alive' if alive else 'dead'}"
            dead = ("crash", why, log_excerpt(server.log_path))
            return self._failure(point, slot, phase, "crash", why, dead[2], info,
                                 templated), dead
        proof, measured, templated = hist or (None, point, templated)   # next-turn: its turn
        # the cold answer is of this prompt only where the history kept it (next-turn: not)
        same = measured.plan.messages == point.plan.messages
        rec = self._judged(measured, slot, phase, res, tok_per_step(before.spec, after.spec),
                           info, templated, tokenize_error, cold if same else None,
                           traffic_facts(before, after), proof)
        rec.history = proof
        if load is not None:
            rec.load = load
            # beside other requests the lone arithmetic does not hold: only the server's
            # own line says which final chunk ran (None: not written)
            rec.final_chunk = (load.get("beside") or {}).get("final_chunk")
        return rec, None

    async def _measured(self, point: Point, phase: str, client: EngineClient, model: str,
                        server: Server, templated: int | None) -> tuple[Any, dict | None, Any]:
        """The measured request, alone, after its history (``--history``: run/history.py;
        its proof, and the point as measured) or (``--load N``) beside N background
        conversations, and then what ran beside it (run/load.py)."""
        opts = self.opts

        def ask(messages=None, request_id=None):
            return client.chat(messages or point.plan.messages, model=model,
                               max_tokens=opts.measure.max_tokens, seed=point.document_seed,
                               logprobs=opts.measure.logprobs, request_id=request_id,
                               prompt_logprobs=int(opts.measure.prompt_logprobs))
        if drives(point, phase):
            res, proof, point, templated = await run_history(HistoryRun(
                point, client, model, server.log_path, templated, opts.running.timeout,
                opts.measure.answer_lines, ask, pool_tokens(point.cfg)))
            return res, None, (proof, point, templated)
        if not opts.measure.load:
            return await ask(), None, None
        await server_gauges(client)   # the first scrape can be slow (lab: an import)
        async with BackgroundLoad(client, model, opts.measure.load, opts.measure.load_mode, point.document_seed,
                                  opts.running.timeout, point.cfg.max_model_len) as bg:
            g0 = await server_gauges(client)
            res = await ask()
            g1 = await server_gauges(client)
        beside = beside_from_log(server.log_path, res.request_id)
        return res, load_facts(bg, g0, g1, beside,
                               preempted_in_log(server.log_path, res.request_id)), None

    # -- records -----------------------------------------------------------------------
    def _failure(self, point, slot, phase, verdict, reason, excerpt, info, templated):
        return self.records.failure(point, slot.id, self.node, phase, verdict, reason,
                                    excerpt, info, templated)

    def _judged(self, point, slot, phase, res, tps, info, templated, tokenize_error,
                cold, traffic: dict | None = None, proof=None) -> PhaseRecord:
        base = self.records.base(point, slot.id, self.node, phase, info, templated)
        ref = self.opts.measure.reference
        expected, ref_tokens, control = control_reference(
            ref, proof, *reference_of(ref, self.golden, point, phase, cold, info))
        if (ref_tokens is None and cold is not None and cold.verdict in CLEAN
                and expected is not None and (cold.answer or "") == expected):
            # the passage has no logprobs; this server's clean cold answer to the same
            # prompt has: the only margin that says something about noise (judge/divergence.py)
            ref_tokens = cold.token_logprobs
        j = judge(res.answer, source=point.plan.document, expected=expected,
                  finish_reason=res.finish_reason)
        verdict, reason = j.verdict, j.reason + control
        invalid = invalid_reason(point, phase, res, templated, info, self.opts.running.isolation,
                                 proof)
        if invalid:
            verdict, reason = "invalid", f"{invalid} (answer judged {j.verdict}: {j.reason})"
        elif unfilled := poison.failure(info.poison):
            # the server ran, but not as the record's poison field claims: not ok
            verdict, reason = "infra", f"{unfilled} (answer judged {j.verdict}: {j.reason})"
        elif verdict in CLEAN and (alone := not_lone(point, traffic, self.opts.running.isolation)):
            # Bug B breaks a lone request: a match beside other clients' requests says
            # nothing about it (run/traffic.py), and is not a pass
            verdict, reason = NOT_LONE, f"{alone} (answer judged ok: {j.reason})"
        measured = measured_fields(point, phase, res, tps, j, verdict, reason, expected,
                                   ref_tokens, info, traffic)
        extra = {"tokenize_error": tokenize_error} if tokenize_error else {}
        if self.opts.measure.prompt_logprobs:   # run/prompt_logprobs.py: the cold one is the reference
            mine = canonical(res.prompt_logprobs)
            if phase == PhaseName.COLD:
                self._cold_plp[point.key] = mine
            else:
                extra["prompt_logprobs"] = compared(mine, self._cold_plp.get(point.key))
        return self.records.build(base, measured, extra or None)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


async def _still_alive(server: Server) -> bool:
    """Death is judged by the process tree, not /health (vLLM has answered 200 on /health
    after its engine core died, vllm-project/vllm#21443). Give a dying process a moment."""
    for _ in range(10):
        if not server.tree_alive():
            return False
        await asyncio.sleep(0.05)
    return server.tree_alive()
