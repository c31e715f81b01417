"""What runs: data points (configuration × residue, each with its prompt) and the plan.

Calibrates once per (tokenizer, context, modulus) and builds every residue's prompt
arithmetically. A configuration without a local tokenizer is planned against a probe
server of that configuration, booted through the engine adapter (``probe_counters``),
asked for templated lengths over ``/tokenize`` and stopped. Golden answers of a
reference run are loaded here too.

``sweep --url`` (``plan_live``): a live server keeps what it served in its prefix cache,
so the only isolation is content: each point's document is cut from its own seed (drawn
from the run's random base, or ``--seed``) and tagged with that seed at the very start of
the message, so no cache block of it is shared with another point, or with another run
on the same server. The layout and size come from one calibration against the server's
``/tokenize``; each document then costs one more count. Every request counts against
``--max-requests``: a plan that cannot fit is refused (``PlanError``, exit 2) before the
first chat request.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import httpx

from engine.presets import ServingConfig

from ..serve.client import EngineClient
from ..settings.configs import config_id, residue_choice
from ..settings.sweep_options import SweepOptions
from ..settings.flags import FLAGS, MEASURE, Rerun, rerun_command
from ..serve.engines import EngineAdapter
from ..errors import CannotRun
from ..serve.live_target import LiveTarget
from .live import requests_per_point
from ..prompts import (CaseTooLong, ChatTokenizer, PlanError, PromptPlan, approx_line_counts,
                       calibrate, calibrate_case, own_document_plan, plan_case_residues, plan_residue)
from ..server_pool import BootFailure, PortAllocator, ServerProcess, Slot
from ..names.phase import PhaseName
from .hits import hit_unit
from .auto import auto_extra_documents, auto_passes
from ..names.isolation import IsolationName

__all__ = ["Point", "SweepPlan", "plan_points", "plan_with_probes", "RemoteCounter",
           "probe_server", "plan_live", "document_seed", "live_rerun"]


@dataclass
class Point:
    cfg: ServingConfig
    cfg_id: str
    residue: int
    modulus: int
    plan: PromptPlan
    rerun: str
    document_seed: int = 0        # its document (``--seed`` lists: one point per seed)
    isolation: str | None = None  # set under --isolation auto: "reset" or "fresh"
    confirms: str | None = None   # auto, fresh pass: why it runs (run/auto.CONFIRMS)
    case: str | None = None       # --prompts: the case id (None: the document prompt)
    modulus_why: str | None = None  # --modulus auto: which modulus and why

    @property
    def key(self) -> tuple[str, str | None, int, int, str]:
        """What a point is, for resume: (configuration, case, residue, document, auto
        pass); ``recordkeys.point_key`` of a record of it is the same tuple."""
        return (self.cfg_id, self.case, self.residue, self.document_seed, self.isolation or "")


@dataclass
class SweepPlan:
    points: list[Point]
    sampled: dict[str, str | None]          # config_id -> note about left-out residues
    planning_s: float
    pad_unit: dict[str, str] = field(default_factory=dict)
    cases: dict[str, dict] = field(default_factory=dict)   # --prompts: case id -> facts


def plan_points(opts: SweepOptions, adapter: EngineAdapter,
                count_many_for: Callable[[ServingConfig], Callable] | None = None) -> SweepPlan:
    """Calibrate once per (tokenizer, context, modulus), then build every residue's prompt
    arithmetically. ``count_many_for`` supplies a counter for configurations without a
    local tokenizer (a probe server's /tokenize)."""
    if opts.running.live is not None:   # --dry-run of --url: nothing is counted before the run
        raise CannotRun("counted by the running server's /tokenize when the sweep runs")
    m, t0 = opts.measure, time.monotonic()
    points: list[Point] = []
    sampled: dict[str, str | None] = {}
    pad_units: dict[str, str] = {}
    calibrations: dict[tuple, Any] = {}
    tokenizers: dict[Path, ChatTokenizer] = {}
    cases: dict[str, dict] = {}
    for cfg in opts.serving.configs:
        cid = config_id(cfg)
        chosen = residue_choice(m, cfg)
        modulus, why, residues, note = (chosen.modulus, chosen.modulus_why, chosen.residues,
                                        chosen.note)
        sampled[cid] = note
        # --isolation auto measures the rule's neighbourhood on two documents or more
        extra = auto_extra_documents(opts, cfg, modulus, residues)
        tdir = adapter.tokenizer_dir(cfg)
        if tdir is not None:
            if tdir not in tokenizers:
                tokenizers[tdir] = ChatTokenizer.from_dir(tdir)
            counter = tokenizers[tdir].count_many
            line_counts = tokenizers[tdir].line_token_counts
            key: tuple = (str(tdir), m.context, modulus)
        elif count_many_for is not None:
            counter = count_many_for(cfg)
            line_counts = None
            key = ("remote", cid, m.context, modulus)
        else:
            raise CannotRun(f"no local tokenizer for {cfg.label()} and no server to ask: "
                            "give --model DIR with tokenizer.json")
        if m.cases:
            points += _case_points(opts, cfg, cid, modulus, residues, counter, key,
                                   calibrations, cases)
            continue
        need = m.context + modulus + m.max_tokens
        if need > cfg.max_model_len:
            raise PlanError(f"--context {m.context} + modulus {modulus} + --max-tokens "
                            f"{m.max_tokens} exceeds max_model_len {cfg.max_model_len} "
                            f"of {cfg.label()}")
        for seed, doc_residues in [(s, residues) for s in m.documents] + extra:
            if key + (seed,) not in calibrations:
                calibrations[key + (seed,)] = calibrate(
                    counter, m.context, modulus, answer_lines=m.answer_lines,
                    seed=seed, line_counts=line_counts)
                check_answer_fits(counter, calibrations[key + (seed,)], modulus, opts, cfg)
            cal = calibrations[key + (seed,)]
            pad_units.setdefault(cid, cal.pad_unit)
            for r in doc_residues:
                points.append(Point(cfg, cid, r, modulus, plan_residue(cal, r, modulus),
                                    rerun_command(opts, cfg, r, modulus, seed), document_seed=seed,
                                    modulus_why=why))
    if opts.running.isolation == IsolationName.AUTO:
        points = auto_passes(points, opts)
    return SweepPlan(points, sampled, time.monotonic() - t0, pad_units, cases)


def check_answer_fits(counter: Callable, cal: Any, modulus: int, opts: SweepOptions,
                      cfg: ServingConfig) -> None:
    """The reference a correct answer reproduces fits ``--max-tokens``: a budget that cuts
    every answer short makes every cell look broken, an engine's bug it is not (issue 50:
    ``--max-tokens 1``, ``--answer-lines 1000``). Counted with the configuration's own
    tokenizer, as the text inside a user turn (the template's tokens taken off)."""
    expected = plan_residue(cal, 0, modulus).expected   # the same lines at every residue
    if not expected:
        return
    empty, full = counter([[{"role": "user", "content": ""}],
                           [{"role": "user", "content": expected}]])
    need = full - empty
    if need > opts.measure.max_tokens:
        raise PlanError(f"--max-tokens {opts.measure.max_tokens} cannot hold the reference of "
                        f"{cfg.label()}: --answer-lines {opts.measure.answer_lines} is {need} tokens; "
                        f"give --max-tokens {need + 8} or more, or fewer --answer-lines")


def _case_points(opts: SweepOptions, cfg: ServingConfig, cid: str, modulus: int,
                 residues: list[int], counter: Callable, key: tuple,
                 calibrations: dict[tuple, Any], facts: dict[str, dict]) -> list[Point]:
    """Every (case, residue) point of one configuration: each case calibrated on this
    configuration's counter, every prompt counted, the lengths checked against the server
    (a case too long for max_model_len, or too short for a prefix-cache hit, is a
    ``PlanError`` naming it, before any point runs)."""
    out, m = [], opts.measure
    unit = hit_unit(cfg.as_dict(), modulus=0)
    hit_phases = [p for p in m.phases if p != PhaseName.COLD]
    for case in m.cases:
        ckey = key + ("case", case.id)
        name = f"{m.prompts}:{case.line}: case {case.id!r}"
        if ckey not in calibrations:
            try:
                calibrations[ckey] = calibrate_case(case, counter, modulus,
                                                    limit=cfg.max_model_len - m.max_tokens)
            except CaseTooLong as e:
                raise PlanError(f"{name}: {e.tokens} templated tokens + --max-tokens "
                                f"{m.max_tokens} exceeds max_model_len {cfg.max_model_len} "
                                f"of {cfg.label()}") from None
        cal = calibrations[ckey]
        longest = cal.base_len + modulus - 1
        if longest + m.max_tokens > cfg.max_model_len:
            raise PlanError(f"{name}: {longest} templated tokens + --max-tokens "
                            f"{m.max_tokens} exceeds max_model_len {cfg.max_model_len} "
                            f"of {cfg.label()}")
        if cfg.prefix_caching and hit_phases and cal.base_len <= unit:
            raise PlanError(f"{name}: {cal.base_len} templated tokens cannot get a prefix-cache "
                            f"hit at every residue (hits come in {unit}-token units, so "
                            f"{', '.join(hit_phases)} needs more than {unit}); lengthen the "
                            "case or use --phases cold")
        plans = plan_case_residues(cal, residues, modulus, counter)
        f = facts.setdefault(case.id, {"line": case.line, "pad": case.describe_pad(),
                                       "expected": case.expected is not None,
                                       "digest": case.digest,
                                       "pad_unit": {}, "templated_len": {}})
        f["pad_unit"][cid] = cal.pad_unit
        f["templated_len"][cid] = [cal.base_len, longest]
        out += [Point(cfg, cid, p.residue, modulus, p,
                      rerun_command(opts, cfg, p.residue, modulus, case=case.id), case=case.id,
                      document_seed=m.seed)
                for p in plans]
    return out


class ModelRefused(CannotRun):
    """The server's /tokenize is there and answered 404 about the model it was asked for
    (vLLM: "The model `x` does not exist."): not a missing endpoint."""


def _error_message(resp, model: str) -> str | None:
    """The message of an OpenAI-style error body (``{"error": {"message": ...}}``) that is
    about the model asked for (``param`` "model", or the message names it); None for
    anything else (a bare 404 page, an endpoint that is not there)."""
    try:
        body = resp.json()
    except ValueError:
        return None
    err = body.get("error", body) if isinstance(body, dict) else None
    msg = str(err.get("message") or "") if isinstance(err, dict) else ""
    about_model = isinstance(err, dict) and (err.get("param") == "model" or
                                             bool(model) and str(model) in msg)
    return msg[:300] if msg and about_model else None


class RemoteCounter:
    """Templated lengths from a probe server's ``/tokenize`` (for engines without a local
    tokenizer): the planner's ``count_many`` over HTTP."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *,
                 http: httpx.Client | None = None):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = http or httpx.Client(base_url=base_url, headers=headers, timeout=120,
                                          trust_env=False)
        self.model = model

    def __call__(self, conversations) -> list[int]:
        out = []
        for messages in conversations:
            resp = self._http.post("/tokenize", json={"model": self.model,
                                                      "messages": list(messages),
                                                      "add_generation_prompt": True})
            said = _error_message(resp, self.model)
            if resp.status_code == 404 and said:   # /tokenize is there; it refused the model
                raise ModelRefused(f"{self.model!r}: the server's /tokenize answered 404 "
                                   f"{said!r}")
            if resp.status_code in (404, 405, 501):
                raise CannotRun("the server has no /tokenize and there is no local "
                                "tokenizer: give --model DIR with tokenizer.json")
            if resp.status_code == 400:  # e.g. a prompt case its chat template refuses
                raise PlanError(f"the server's /tokenize refused the messages: "
                                f"{resp.text[:300]}")
            resp.raise_for_status()
            data = resp.json()
            out.append(int(data["count"]) if "count" in data else len(data["tokens"]))
        return out

    def close(self) -> None:
        self._http.close()


@contextlib.asynccontextmanager
async def probe_server(opts: SweepOptions, adapter: EngineAdapter, cfg: ServingConfig,
                       slot: Slot, log_path: Path, ports: PortAllocator,
                       launcher: Callable[..., ServerProcess] = ServerProcess,
                       ) -> AsyncIterator[tuple[str, str]]:
    """A server of ``cfg`` for planning, through the adapter, started by ``launcher`` (the
    run's ``ServerGroup``): yields (base URL, model name to ask for) and stops it on exit.
    A probe that does not boot is ``CannotRun``."""
    port = ports.acquire()
    argv, env = adapter.command(cfg, port, slot)
    if slot.gpu is not None:
        env = {"CUDA_VISIBLE_DEVICES": slot.gpu, **env}
    server = launcher(argv, env, port, log_path, slot)
    client = EngineClient(server.base_url, timeout=opts.running.timeout, api_key=opts.running.api_key)
    try:
        try:
            server.start()
            await server.wait_ready(client, opts.running.boot_timeout)
        except BootFailure as e:
            raise CannotRun(f"probe server for planning did not boot: {e.reason}") from None
        model = opts.serving.served_model_name or adapter.model_name(cfg)
        if not model:
            models = await client.models()
            model = (models[0].get("id") if models else None) or cfg.model or "default"
        yield server.base_url, model
    finally:
        await client.aclose()
        await asyncio.shield(server.stop())
        ports.release(port)


async def plan_with_probes(opts: SweepOptions, adapter: EngineAdapter, *, logs_dir: Path,
                           launcher: Callable[..., ServerProcess] = ServerProcess
                           ) -> SweepPlan:
    """Plan every point; configurations without a local tokenizer are planned against a
    probe server of that configuration (booted by ``launcher``, asked, stopped); ``--url``
    is planned against the running server (``plan_live``, below)."""
    if opts.running.live is not None:
        return await asyncio.to_thread(plan_live, opts)
    need = [c for c in opts.serving.configs if adapter.tokenizer_dir(c) is None]
    if not need:
        return await asyncio.to_thread(plan_points, opts, adapter)
    counters: dict[str, RemoteCounter] = {}
    ports = PortAllocator()
    async with contextlib.AsyncExitStack() as stack:
        try:
            for cfg in need:
                url, model = await stack.enter_async_context(probe_server(
                    opts, adapter, cfg, opts.running.slots[0],
                    logs_dir / f"{config_id(cfg)}-probe-{opts.running.slots[0].id}.log", ports,
                    launcher))
                counters[config_id(cfg)] = RemoteCounter(url, model, opts.running.api_key)
            return await asyncio.to_thread(plan_points, opts, adapter,
                                           lambda cfg: counters[config_id(cfg)])
        finally:
            for c in counters.values():
                c.close()


# -- sweep --url ----------------------------------------------------------------------------

def document_seed(nonce: int, cfg_id: str, residue: int) -> int:
    """The document of one point: distinct per run (``nonce``), configuration and residue."""
    digest = hashlib.sha1(f"{nonce}:{cfg_id}:{residue}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def live_rerun(opts: SweepOptions, url: str, cfg, residue: int, modulus: int) -> str:
    """The command that measures this cell again on the same server (on a new document:
    the old one is in its cache)."""
    r = Rerun(opts, cfg, residue, modulus)
    argv = ["sweep", "--url", url]
    for f in FLAGS:
        if f.group == MEASURE and f.rerun is not None and f.name != "--seed":
            argv += f.rerun(r)
    return shlex.join(argv)


class _BudgetedCounter(RemoteCounter):
    """The server's /tokenize, refusing to go past the request budget while planning."""

    def __init__(self, target: LiveTarget, model: str, timeout: float):
        super().__init__(target.url, model, http=target.http_client(timeout))
        self.budget = target.budget
        self.url = target.url

    def __call__(self, conversations) -> list[int]:
        if self.budget.sent + len(conversations) > self.budget.limit:
            raise PlanError(f"--max-requests {self.budget.limit} is spent before the plan is "
                            f"made ({self.budget.sent} requests to read the server and count "
                            "prompts); raise it")
        try:
            return super().__call__(conversations)
        except ModelRefused as e:   # the user's --served-model-name (or the server's own)
            raise PlanError(f"--url {self.url}: model {e}; check --served-model-name "
                            "(GET /v1/models lists the names it serves)") from None
        except CannotRun:   # no /tokenize: nothing else can count what this server counts
            raise CannotRun(f"--url {self.url}: the server has no /tokenize, which a live "
                            "sweep needs to hit each residue exactly (vLLM and the lab have "
                            "it)") from None


def plan_live(opts: SweepOptions) -> SweepPlan:
    """Every point of the one live configuration, each on its own document."""
    t0 = time.monotonic()
    m = opts.measure
    target: LiveTarget = opts.running.live
    cfg = opts.serving.configs[0]
    cid = config_id(cfg)
    chosen = residue_choice(m, cfg)
    modulus, why, residues, note = chosen.modulus, chosen.modulus_why, chosen.residues, chosen.note
    need_len = m.context + modulus + m.max_tokens
    if cfg.max_model_len and need_len > cfg.max_model_len:
        raise PlanError(f"--context {m.context} + modulus {modulus} + --max-tokens "
                        f"{m.max_tokens} exceeds the server's max_model_len "
                        f"{cfg.max_model_len}")
    model = opts.serving.served_model_name or (target.facts.model if target.facts else None) or "default"
    counter = _BudgetedCounter(target, model, opts.running.timeout)
    try:
        cal = calibrate(counter, m.context, modulus, answer_lines=m.answer_lines,
                        seed=target.nonce, line_counts=approx_line_counts(counter))
        per_point = requests_per_point(m.phases)
        budget = target.budget
        need = budget.sent + len(residues) * (1 + per_point)
        if need > budget.limit:
            raise PlanError(
                f"--max-requests {budget.limit}: this sweep needs {need} requests "
                f"({budget.sent} to read the server and calibrate, then per point one to "
                f"size its document and {per_point} to run it, x {len(residues)} points); "
                "raise it or sweep fewer residues")
        points = []
        for r in residues:
            seed = document_seed(target.nonce, cid, r)
            points.append(Point(cfg, cid, r, modulus,
                                own_document_plan(cal, counter, r, modulus, seed),
                                live_rerun(opts, target.url, cfg, r, modulus), document_seed=seed,
                                modulus_why=why))
    finally:
        counter.close()
    return SweepPlan(points, {cid: note}, time.monotonic() - t0, {cid: cal.pad_unit})
