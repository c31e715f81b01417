"""``sweep --url URL``: sweep a server that is already running; start nothing, stop nothing.

A live server cannot be made fresh, so isolation is by content alone (``live``): every
data point gets a document of its own (``prompts.own_document_plan``: its own seed, and a
tag naming it at the very start of the message, so not even the first cache block is
shared with another point or another run), its cold phase must show ``cached_tokens`` 0
and its hit phases ``cached_tokens`` > 0, or the cell is ``invalid`` (``run/point.py``).

What the server is comes from what it reports, read once before anything else is sent:
``/v1/models`` (model, max_model_len), ``/version`` (the lab: its whole effective
configuration), ``/server_info?config_format=json`` (vLLM with its development endpoints
on: the VllmConfig) and ``/metrics`` (vLLM's ``vllm:cache_config_info``: block size,
prefix caching). Whatever none of them says is named in the configuration's
``not_reported`` and in its label, never filled in from a preset.

Production safety: ``--concurrency`` data points at once (default 1) and a request budget
(``--max-requests``) that counts every HTTP request the sweep sends, planning included; a
plan that needs more is refused before the first chat request (run/plan.py, ``plan_live``).
"""
from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from engine.presets import ServingConfig

from ..serve.engines import ADAPTERS, EngineAdapter, normalise_reported
from ..serve.facts import ServerFacts
from ..serve.live_target import API_KEY_ENVS, LiveTarget
from ..errors import CannotRun, UsageError
from ..settings.configs import residue_choice
from ..settings.sweep_options import SweepOptions
from ..settings.flag_facts import url_refused
from ..names.phase import PhaseName

__all__ = ["connect", "LiveConfig", "LiveAdapter", "LiveServer", "read_server", "live_config",
           "live_adapter", "refused_flags", "requests_per_point"]

def connect(opts: SweepOptions) -> SweepOptions:
    """The session's first step of a ``--url`` sweep: the server read (four GETs), its
    configuration checked against the phases and ``--modulus``, and the options it gives
    back carry the connected target, that one configuration and the engine's logprobs
    default (``--logprobs`` unless given). Options without a target come back as they are."""
    target: LiveTarget | None = opts.running.live
    if target is None or target.cfg is not None:
        return opts
    with target.http_client(opts.running.timeout) as http:
        report = read_server(target.url, http)
    cfg, facts = live_config(target.url, report)
    hits = [p for p in opts.measure.phases if p != PhaseName.COLD]
    if cfg.prefix_caching is False and hits:
        raise UsageError(f"--url {target.url}: the server reports prefix caching off, so "
                         f"{', '.join(hits)} cannot hit the cache; use --phases cold")
    if opts.measure.modulus is None and not (cfg.prefix_match_unit or cfg.block_size):
        raise UsageError(f"--modulus auto: {target.url} does not report its block size or "
                         "match unit; give --modulus N")
    residue_choice(opts.measure, cfg)   # a bad --residues for this server: exit 2, now
    target = dataclasses.replace(target, report=report, cfg=cfg, facts=facts)
    default = live_adapter(target).logprobs_default
    return opts.replace(
        live=target, configs=(cfg,), logprobs_default=default,
        logprobs=default if opts.measure.logprobs is None else opts.measure.logprobs)


def refused_flags(given: dict[str, Any]) -> list[str]:
    """The flags ``given`` (those a command line wrote: ``flag_manifest.parse_flags``) that
    configure or start a server (``--url`` cannot honour them: the server is already
    running as it is)."""
    return url_refused(given)


def requests_per_point(phases: tuple[str, ...]) -> int:
    """Every request ``run/point.py`` sends for one point: /tokenize, then per phase the
    /metrics scrape before and after the measured request (and the warm-up for warm)."""
    return 1 + sum(3 + (phase == PhaseName.WARM) for phase in phases)


def read_server(url: str, http: httpx.Client) -> dict[str, Any]:
    """What the server reports about itself (four GETs, nothing that changes it)."""
    try:
        resp = http.get("/v1/models")
    except httpx.HTTPError as e:
        raise CannotRun(f"--url {url}: no server answers ({type(e).__name__}: {e})") from None
    if resp.status_code in (401, 403):
        raise UsageError(f"--url {url}: the server refused the request (HTTP "
                         f"{resp.status_code}); give its key in {API_KEY_ENVS[0]} (or "
                         f"{API_KEY_ENVS[1]}, or --api-key)")
    try:
        models = resp.json().get("data") if resp.status_code == 200 else None
    except ValueError:
        models = None
    if not models or not isinstance(models, list) or not isinstance(models[0], dict):
        raise CannotRun(f"--url {url}: GET /v1/models answered HTTP {resp.status_code} "
                        "without a model list: not an OpenAI-compatible server")
    report: dict[str, Any] = {"models": models}
    for key, path in (("version", "/version"),
                      ("server_info", "/server_info?config_format=json")):
        report[key] = _json_or_none(http, path)
    try:
        metrics = http.get("/metrics")
        report["cache_config_info"] = (_cache_config_info(metrics.text)
                                       if metrics.status_code == 200 else None)
    except (httpx.HTTPError, ValueError):
        report["cache_config_info"] = None
    return report


def _json_or_none(http: httpx.Client, path: str) -> dict | None:
    try:
        resp = http.get(path)
        data = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _cache_config_info(text: str) -> dict[str, str] | None:
    """The labels of vLLM's ``vllm:cache_config_info`` gauge (block_size,
    enable_prefix_caching, ...), or None when the server has no such metric."""
    # here, not at the top: start-up cost paid by every sweep process (~11 ms)
    from prometheus_client.parser import text_string_to_metric_families
    for family in text_string_to_metric_families(text):
        if family.name.startswith("vllm:cache_config_info"):
            for sample in family.samples:
                return dict(sample.labels)
    return None


@dataclass(frozen=True)
class LiveConfig(ServingConfig):
    """A configuration read from a running server: every field it did not report is None
    and named in ``not_reported``."""

    url: str = ""
    not_reported: tuple[str, ...] = ()

    def label(self) -> str:
        host = urlsplit(self.url).netloc or self.url
        parts = [f"live {host}", str(self.model or "?")]
        if self.method:
            parts.append(f"SPEC={self.method} k={self.draft_tokens}")
        elif "method" not in self.not_reported:
            parts.append("SPEC=none")
        if self.cudagraph_mode:
            parts.append(str(self.cudagraph_mode))
        if self.prefix_caching is False:
            parts.append("no-prefix-cache")
        elif self.block_size:
            parts.append(f"block={self.block_size} unit={self.prefix_match_unit or '-'}")
        if self.patches:
            parts.append(f"patches={self.patches}")
        if self.geometry:
            parts.append(self.geometry)
        if self.not_reported:
            parts.append(f"(not reported: {', '.join(self.not_reported)})")
        return " ".join(parts)


# What a live configuration needs to name Bug B's residues; a field the server does not
# report stays unknown (None).
_KNOWN = ("method", "draft_tokens", "cudagraph_mode", "prefix_caching", "block_size",
          "prefix_match_unit", "patches")


def live_config(url: str, report: dict[str, Any]) -> tuple[LiveConfig, ServerFacts]:
    """(the configuration, the facts for the records: the effective configuration, engine
    version, patch status, model)."""
    first = report["models"][0]
    version = report.get("version") or {}
    eff: dict[str, Any] = {}
    engine = "unknown"
    if isinstance(version.get("effective_config"), dict):       # the lab reports it all
        eff = normalise_reported(version["effective_config"])
        engine = str(version.get("engine") or "unknown")
    info = report.get("server_info") or {}
    if isinstance(info.get("vllm_config"), dict):
        eff = {**_from_vllm_config(info["vllm_config"]), **eff}
        engine = "vllm"
    cache = report.get("cache_config_info") or {}
    if cache:
        engine = "vllm" if engine == "unknown" else engine
        if cache.get("block_size", "").isdigit():
            eff.setdefault("block_size", int(cache["block_size"]))
        if cache.get("enable_prefix_caching") in ("True", "False"):
            eff.setdefault("prefix_caching", cache["enable_prefix_caching"] == "True")
    if engine == "unknown" and first.get("owned_by") == "vllm":
        engine = "vllm"
    values = {k: eff.get(k) for k in _KNOWN}
    if "method" in eff and eff["method"] is None:   # reported: no speculative decoding
        values["draft_tokens"] = 0
    not_reported = tuple(k for k in _KNOWN if values[k] is None
                         and not (k == "draft_tokens" and "method" in eff)
                         and not (k == "prefix_match_unit" and "prefix_match_unit" in eff))
    cfg = LiveConfig(
        engine=engine, model=str(first.get("id")),
        spec=str(values["method"] or ("none" if "method" in eff else "?")), ctx="live",
        max_model_len=int(first.get("max_model_len") or eff.get("max_model_len") or 0),
        kv_cache_memory_bytes=None, geometry=eff.get("geometry"), url=url,
        max_num_batched_tokens=eff.get("max_num_batched_tokens"),
        not_reported=not_reported, **values)
    facts = ServerFacts(config=cfg.as_dict(), engine_version=str(version.get("version")
                                                                 or "unknown"),
                        patch_status=version.get("patches"), model=first.get("id"))
    return cfg, facts


def _from_vllm_config(vc: dict[str, Any]) -> dict[str, Any]:
    """The fields of vLLM's ``/server_info`` VllmConfig (JSON) that name a configuration."""
    out: dict[str, Any] = {}
    cache = vc.get("cache_config") or {}
    if isinstance(cache.get("block_size"), int):
        out["block_size"] = cache["block_size"]
    if isinstance(cache.get("enable_prefix_caching"), bool):
        out["prefix_caching"] = cache["enable_prefix_caching"]
    if "prefix_match_unit" in cache:
        out["prefix_match_unit"] = cache["prefix_match_unit"]
    if "speculative_config" in vc:
        spec = vc["speculative_config"] or {}
        out["method"] = spec.get("method")
        if spec:
            out["draft_tokens"] = spec.get("num_speculative_tokens")
    mode = (vc.get("compilation_config") or {}).get("cudagraph_mode")
    # CUDAGraphMode's JSON is its value: 0, 1, 2, [2, 0], [2, 1]
    names = {"0": "NONE", "1": "PIECEWISE", "2": "FULL", "[2, 0]": "FULL_DECODE_ONLY",
             "[2, 1]": "FULL_AND_PIECEWISE"}
    if mode is not None:
        out["cudagraph_mode"] = names.get(str(mode), str(mode).split(".")[-1])
    version = vc.get("model_config") or {}
    if version.get("max_model_len"):
        out["max_model_len"] = version["max_model_len"]
    return out


class LiveAdapter(EngineAdapter):
    """The engine seam for a server that is already running: it never builds a command;
    the effective configuration is what the server reported before the sweep."""

    name = "live"
    logprobs_default = 0   # set per server: that of the engine it reports, if one of ours

    def __init__(self, target: LiveTarget, cfg: LiveConfig, facts: ServerFacts):
        self.target = target
        self.served_model_name = facts.model
        # as --engine lab / vllm ask (their answers do not change); an unknown server: not
        known = ADAPTERS.get(cfg.engine)
        self.logprobs_default = known.logprobs_default if known else 0
        self.info = dataclasses.replace(facts, config=cfg.as_dict())   # the points' own copy

    def check(self, configs, slot) -> None:
        """Nothing to build: the server exists."""

    def command(self, cfg, port, slot):
        raise CannotRun("--url: the server is already running; the sweep starts none")

    def tokenizer_dir(self, cfg) -> Path | None:
        return None   # the server's own /tokenize is the truth (run/plan.py: plan_live)

    def shell_line(self, cfg, slot=None) -> str:
        return f"(none started: --url {self.target.url} is already running)"

    async def effective(self, client, cfg, log_text) -> dict[str, Any]:
        return dict(self.info)


def live_adapter(target: LiveTarget) -> "LiveAdapter":
    """The adapter of a connected target (``connect`` filled in its configuration)."""
    assert target.cfg is not None and target.facts is not None
    return LiveAdapter(target, target.cfg, target.facts)


class LiveServer:
    """``run/point.Server`` for a server the sweep did not start: start and stop do
    nothing; alive means its port accepts a connection."""

    boot_s = None
    how = "attached"

    def __init__(self, url: str, log_path: Path):
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.url = url
        self.log_path = log_path   # no log of its own: failures say what the client saw

    @property
    def base_url(self) -> str:
        return self.url

    async def prepare(self) -> None:
        """Nothing: already running."""

    def start(self) -> None:
        """Already running."""

    async def wait_ready(self, client, timeout: float) -> float:
        return 0.0

    async def stop(self) -> float:
        return 0.0   # never stopped: it is someone's running service

    def tree_alive(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0):
                return True
        except OSError:
            return False
