"""``--engine sglang``: ``python -m sglang.launch_server`` from the shared presets, in
SGLang's spellings (read from sglang 0.5.12's source: SGLang modules are cited by their
dotted names, ``sglang.srt.server_args.ServerArgs.add_cli_args``), and what its server says
back.

- Readiness: ``GET /health`` answers 503 while the server's status is ``Starting`` and 200
  once its warm-up request has run (``sglang.srt.entrypoints.http_server.health_generate``):
  the pool's ordinary /health poll.
- The templated length: SGLang's ``POST /tokenize`` (and ``/v1/tokenize``) takes chat
  ``messages`` and renders them as a chat completion does
  (``sglang.srt.entrypoints.openai.serving_tokenize``, ``_tokenize_chat_request``), answering ``{tokens, count, max_model_len}``; every answer's
  ``usage.prompt_tokens`` is checked against it as on vLLM.
- The hit: ``--enable-cache-report`` puts ``usage.prompt_tokens_details.cached_tokens`` in
  the OpenAI usage, and leaves the details out when nothing was cached
  (``sglang.srt.entrypoints.openai.usage_processor.UsageProcessor._details_if_cached``):
  ``read_usage`` reads that
  absence as 0 where the server reports the flag on.
- The effective configuration: ``GET /server_info`` (``/get_server_info`` before it):
  ``ServerArgs`` as a dict, the scheduler's pool size, and each scheduler's own view of the
  arguments (``internal_states``, read first: what the scheduler ran after its own
  adjustments), and the version.
- Isolation: ``reset`` empties the radix cache with ``/flush_cache``; ``restore`` is refused
  (``/release_memory_occupation`` + ``/resume_memory_occupation`` are not shown to give a
  just-booted state); ``--poison`` is not supported (no fill RPC).
"""
from __future__ import annotations

import asyncio
import dataclasses
import sys
from typing import Any, Mapping

from engine.presets import ServingConfig

from ..errors import CannotRun
from .adapter import EngineAdapter
from .poison import NOT_SUPPORTED
from .slots import Slot

__all__ = ["SglangAdapter", "SGLANG_MODULE", "sglang_fields", "graph_flags", "spec_flags"]

SGLANG_MODULE = "sglang.launch_server"
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
# vLLM's cudagraph modes in SGLang's two switches: the decode (and verify) graph
# (--disable-cuda-graph) and the piecewise prefill graph (--disable-piecewise-cuda-graph).
# FULL (one full graph over mixed prefill batches too) has no SGLang spelling.
GRAPH_FLAGS: dict[str, tuple[str, ...]] = {
    "FULL_AND_PIECEWISE": (),
    "FULL_DECODE_ONLY": ("--disable-piecewise-cuda-graph",),
    "PIECEWISE": ("--disable-cuda-graph",),
    "NONE": ("--disable-cuda-graph", "--disable-piecewise-cuda-graph"),
}
# (decode graph off, piecewise prefill graph off) -> the mode, as the server reports them
MODE_OF_SWITCHES = {("--disable-cuda-graph" in f, "--disable-piecewise-cuda-graph" in f): m
                    for m, f in GRAPH_FLAGS.items()}
# the harness's speculative method -> SGLang's algorithm; k drafts verify k + 1 tokens
# (--speculative-num-draft-tokens counts the verify window: the num_tokens_per_bs of
# sglang.srt.model_executor.cuda_graph_runner.CudaGraphRunner); NEXTN is SGLang's name for
# a model's own MTP head (an EAGLE alias)
ALGORITHM_OF_METHOD = {"ngram": "NGRAM", "mtp": "NEXTN", "dflash": "DFLASH"}
METHOD_OF_ALGORITHM = {"NGRAM": "ngram", "NEXTN": "mtp", "EAGLE": "mtp", "DFLASH": "dflash"}


def graph_flags(mode: str) -> tuple[str, ...]:
    # a mode SGLang lacks never gets here: config_refusal (below) refuses it, asked by a row
    # of settings/flag_checks.RULES before any server and by explain's rungs
    return GRAPH_FLAGS[mode]


def spec_flags(method: str | None, k: int) -> list[str]:
    """SGLang's speculative flags for ``k`` drafts of ``method`` (none: [])."""
    if not method:
        return []
    out = ["--speculative-algorithm", ALGORITHM_OF_METHOD[method]]
    if method == "mtp":   # a chain of k one-token steps (topk 1)
        out += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
    return out + ["--speculative-num-draft-tokens", str(k + 1)]


def sglang_fields(args: Mapping[str, Any]) -> dict[str, Any]:
    """``ServerArgs`` fields (a parsed line's, or ``/server_info``'s) as configuration
    fields: only those ``args`` holds."""
    out: dict[str, Any] = {}
    if args.get("page_size") is not None:   # hits are whole pages (RadixKey.page_aligned)
        out["block_size"] = out["prefix_match_unit"] = int(args["page_size"])
    if "disable_radix_cache" in args:
        out["prefix_caching"] = not args["disable_radix_cache"]
    if "speculative_algorithm" in args:
        algo = args["speculative_algorithm"]
        out["method"] = METHOD_OF_ALGORITHM.get(str(algo).upper(), str(algo).lower()) \
            if algo else None
        n = args.get("speculative_num_draft_tokens")
        out["draft_tokens"] = int(n) - 1 if algo and n else 0
    if "disable_cuda_graph" in args or "disable_piecewise_cuda_graph" in args:
        out["cudagraph_mode"] = MODE_OF_SWITCHES[(bool(args.get("disable_cuda_graph")),
                                                  bool(args.get("disable_piecewise_cuda_graph")))]
    for src, dest in (("context_length", "max_model_len"),
                      ("chunked_prefill_size", "max_num_batched_tokens")):
        if args.get(src) is not None:
            out[dest] = int(args[src])
    return out


# what the records keep of /server_info beside the configuration fields
KEPT = ("speculative_algorithm", "speculative_num_draft_tokens", "speculative_num_steps",
        "speculative_eagle_topk", "page_size", "chunked_prefill_size", "disable_radix_cache",
        "enable_cache_report", "disable_cuda_graph", "disable_piecewise_cuda_graph",
        "cuda_graph_max_bs", "attention_backend", "sampling_backend", "mem_fraction_static",
        "max_total_tokens", "max_total_num_tokens", "random_seed", "context_length",
        "mamba_scheduler_strategy", "enable_mixed_chunk", "disable_overlap_schedule")


def effective_from_info(cfg: ServingConfig, info: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration a booted SGLang server ran: the scheduler's view of its arguments
    (``internal_states[0]``) over the tokenizer process's; the presets where it said
    nothing, and ``config_source`` naming which."""
    states = info.get("internal_states")
    state = states[0] if isinstance(states, list) and states and \
        isinstance(states[0], dict) else {}
    args = {**info, **state}
    eff = cfg.as_dict()
    eff["engine"] = "sglang"
    eff["patches"] = "none"   # the residue-lab fixes are a vLLM plugin
    eff["kv_cache_memory_bytes"] = None   # SGLang sizes its pool in tokens (below)
    if not args:
        eff["config_source"] = "the presets (the server's /server_info did not answer)"
        return eff
    eff.update(sglang_fields(args))
    eff["sglang"] = {k: args[k] for k in KEPT if k in args}
    eff["config_source"] = "the server's /server_info" + (
        " (internal_states[0])" if state else "")
    return eff


class SglangAdapter(EngineAdapter):
    """``python -m sglang.launch_server`` from the shared presets (module docstring)."""

    name = "sglang"
    boot_timeout_s = 900.0
    needs_gpu = True
    needs_model = True            # --model or the --serve line's (a flag_checks.RULES row)
    default_patches = "none"      # the residue-lab fixes are a vLLM plugin: none here
    reset_path = "/flush_cache"   # sglang.srt.entrypoints.http_server.flush_cache (GET, POST)
    poison_refusal = NOT_SUPPORTED   # no residue_lab_poison RPC (flag_checks.RULES)
    help_notes = {"--engine": "an SGLang install (python -m sglang.launch_server), on GPU; "
                              "needs --model; runs unpatched",
                  "--model": "required, a local model directory or HF id",
                  "--geometry": "hybrid adds --mamba-scheduler-strategy extra_buffer",
                  # a drafter checkpoint (DFLASH, EAGLE) is SGLang's own flag
                  "--engine-arg": "--engine-arg=--speculative-draft-model-path=DIR"}

    def __init__(self, *, extra_args: tuple[str, ...] = (),
                 served_model_name: str | None = None) -> None:
        self.extra_args = tuple(extra_args)
        self.served_model_name = served_model_name

    @classmethod
    def build(cls, *, extra_args, served_model_name, **_):
        return cls(extra_args=extra_args, served_model_name=served_model_name)

    @classmethod
    def restore_refusal(cls) -> str:
        return ("--isolation restore: --engine sglang cannot be proven back at its "
                "just-booted state (/release_memory_occupation + /resume_memory_occupation "
                "are not shown equal to a fresh boot); use --isolation fresh")

    @classmethod
    def config_refusal(cls, cfg: ServingConfig) -> str | None:
        if cfg.patches != "none":
            return ("--engine sglang runs SGLang as installed (the residue-lab fixes are a "
                    "vLLM plugin): give --patches none")
        if cfg.prefix_caching and cfg.prefix_match_unit not in (None, cfg.block_size):
            return (f"SGLang's prefix hits are whole pages: --prefix-match-unit "
                    f"{cfg.prefix_match_unit} must equal --block-size {cfg.block_size} "
                    "(its --page-size)")
        if cfg.cudagraph_mode not in GRAPH_FLAGS:
            return (f"--cudagraph {cfg.cudagraph_mode}: SGLang has no such mode (its decode "
                    f"graph and its piecewise prefill graph give {', '.join(GRAPH_FLAGS)})")
        return None

    def check_can_start(self) -> None:
        import importlib.util
        try:   # a folder named sglang on the path is a namespace package, not SGLang
            spec = importlib.util.find_spec("sglang")
            found = spec is not None and spec.origin not in (None, "namespace")
        except (ImportError, ValueError):
            found = False
        if not found:
            raise CannotRun(f"--engine sglang: SGLang is not installed in {sys.executable} "
                            "(the Python that starts its servers): pip install sglang, or run "
                            "sweep from the environment that has it")

    def model_name(self, cfg: ServingConfig) -> str | None:
        # SGLang serves --model-path as the model name unless --served-model-name is given
        return self.served_model_name or cfg.model

    def command(self, cfg, port, slot):
        env = {"PYTHONUNBUFFERED": "1"}
        if self.serve is not None:   # --serve: the user's line, what the harness adds
            return self.serve.argv(self, port, slot), env
        argv = [sys.executable, "-m", SGLANG_MODULE, "--model-path", cfg.model,
                "--host", "127.0.0.1", "--port", str(port), "--random-seed", "0",
                "--page-size", str(cfg.block_size), "--context-length", str(cfg.max_model_len),
                *graph_flags(cfg.cudagraph_mode), *spec_flags(cfg.method, cfg.draft_tokens)]
        if not cfg.prefix_caching:
            argv.append("--disable-radix-cache")
        if cfg.max_num_batched_tokens:
            argv += ["--chunked-prefill-size", str(cfg.max_num_batched_tokens)]
        if cfg.geometry == "hybrid" and cfg.prefix_caching:
            # ServerArgs._handle_mamba_radix_cache: the default (no_buffer) sets page_size 1
            # and refuses speculative decoding beside the radix cache
            argv += ["--mamba-scheduler-strategy", "extra_buffer"]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        return argv + self.serve_flags(slot), env

    def serve_flags(self, slot: Slot) -> list[str]:
        """What the harness adds to every server (a --serve line too): the cached-token
        counts, /metrics, a GPU group's TP size, the --engine-args."""
        line = self.serve
        out = [f for f in ("--enable-cache-report", "--enable-metrics")
               if line is None or not line.has(f)]
        if slot.tensor_parallel_size > 1 and (line is None or line.tensor_parallel_size == 1):
            out += ["--tp-size", str(slot.tensor_parallel_size)]
        return out + list(self.extra_args)

    async def effective(self, client, cfg, log_text):
        info, models = await asyncio.gather(client.server_info(SERVER_INFO_PATHS),
                                            client.models())
        first = models[0] if models else {}
        config = effective_from_info(cfg, info)
        if first.get("max_model_len"):
            config["max_model_len"] = int(first["max_model_len"])
        return {"config": config, "engine_version": str(info.get("version", "unknown")),
                "patch_status": None, "model": first.get("id")}

    def read_usage(self, res, config):
        """No ``prompt_tokens_details`` from a server that reports its cache is 0 cached
        tokens (``UsageProcessor._details_if_cached``); from any other, still unknown."""
        reports = (config.get("sglang") or {}).get("enable_cache_report") is True
        if reports and res.cached_tokens is None and res.prompt_tokens is not None:
            return dataclasses.replace(res, cached_tokens=0)
        return res


def sglang_parser(parser_cls) -> tuple[Any, str]:
    """SGLang's own server parser (``ServerArgs.add_cli_args`` on a ``parser_cls``, as
    ``prepare_server_args`` builds it), or (None, why) where it cannot be built here."""
    try:
        import sglang
        from sglang.srt.server_args import ServerArgs
        parser = parser_cls(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        return parser, f"SGLang {getattr(sglang, '__version__', '?')}'s own parser " \
                       "(ServerArgs.add_cli_args)"
    except Exception as e:   # not installed, or its imports fail on this machine
        return None, f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"


def written_args(parser: Any, ns: Any, written: list[str]) -> dict[str, Any]:
    """The parsed values of the flags ``written`` names (SGLang's defaults left out: the
    server's own, the records' effective configuration says them)."""
    actions = getattr(parser, "_option_string_actions", {})
    dests = {actions[a.split("=", 1)[0]].dest for a in written
             if a.startswith("-") and a.split("=", 1)[0] in actions}
    return {d: getattr(ns, d) for d in dests if hasattr(ns, d)}
