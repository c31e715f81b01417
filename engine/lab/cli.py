"""Command line: vLLM-spelled flags validated into one ``LabConfig``; boot; serve.

Mirrors ``vllm/entrypoints/openai/cli_args.py`` + ``vllm/engine/arg_utils.py`` (flag
spelling and JSON-valued ``--speculative-config`` / ``-cc``) and the start of
``vllm/entrypoints/openai/api_server.py`` (engine first, then the HTTP server; the KV
capacity check fails the boot before anything listens). Bad flag values: one line on
stderr, exit 2. Capacity failure: vLLM's ValueError message, exit 1.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

from .config import (CUDAGRAPH_MODES, GEOMETRIES, MAMBA_CACHE_MODES, MODEL_DIR, PATCHES,
                     SPEC_METHODS, VERSION, CapacityError, ConfigError, LabConfig)

T0 = time.monotonic()


def _json_arg(flag: str):
    def parse(v: str) -> dict:
        try:
            d = json.loads(v)
        except json.JSONDecodeError as e:
            raise argparse.ArgumentTypeError(f"{flag}: not valid JSON ({e})") from None
        if not isinstance(d, dict):
            raise argparse.ArgumentTypeError(f"{flag}: must be a JSON object")
        return d
    return parse


def _patches(v: str) -> tuple[str, ...]:
    v = v.strip()
    if v == "all":
        return PATCHES
    if v == "none":
        return ()
    names = {p.strip() for p in v.replace("+", ",").split(",") if p.strip()}
    bad = sorted(names - set(PATCHES))
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown patch {', '.join(bad) or repr(v)}; allowed: all, none, or a comma list of "
            + ", ".join(PATCHES))
    return tuple(p for p in PATCHES if p in names)


def _pos_int(v: str) -> int:
    try:
        i = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {v!r}") from None
    if i <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {v}")
    return i


_SIZE = re.compile(r"(\d+(?:\.\d+)?)([kmgtKMGT])")
_SIZE_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
               "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _size(v: str) -> int:
    """A positive integer as vLLM's CLI writes sizes (``5G`` = 5 GiB, ``5g`` = 5 GB, vLLM's
    ``human_readable_int``: lower case decimal, upper case binary), or a plain integer."""
    m = _SIZE.fullmatch(v.strip())
    if not m:
        return _pos_int(v)
    n = int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {v}")
    return n


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one clear line, exit 2
        sys.stderr.write(f"engine.lab: error: {message}\n")
        raise SystemExit(2)


class Refused(ValueError):
    """A flag value the server would refuse at boot (``check_args``)."""


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """A flag's default after its help, once: not where the help says its own default (a
    default computed at run time) nor where there is none (issue 50: "(default: lab-copy)
    (default: None)")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or "default" in text:
            return text
        return super()._get_help_string(action)


class _QuietParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise Refused(message)


def check_args(argv: list[str]) -> str | None:
    """What a server started with ``argv`` would refuse at boot (a flag value it cannot
    run with, e.g. a match unit that is not a multiple of the block), said without starting
    it, or None. A KV pool too small for ``--max-model-len`` is not refused here: that is
    the boot failure a sweep records, as vLLM's."""
    try:
        # the devices are the server's environment, not this process's: not checked here
        config_from_args(argv, parser_cls=_QuietParser, devices=None)
    except Refused as e:
        return str(e)
    except CapacityError:
        pass
    return None


def build_parser(parser_cls: type[argparse.ArgumentParser] = _Parser) -> argparse.ArgumentParser:
    p = parser_cls(
        prog="python -m engine.lab",
        description="residue-lab CPU lab engine: an OpenAI-compatible server that replicates "
                    "vLLM's scheduler, paged KV cache, prefix cache, spec decode and cudagraph "
                    "dispatch around a deterministic copy model (not a model of quality).",
        formatter_class=_DefaultsFormatter)
    a = p.add_argument
    _add_vllm_flags(a)
    _add_lab_flags(a)
    a("--version", action="version", version=VERSION)
    return p


def _add_vllm_flags(a) -> None:
    """The flags vLLM's ``vllm serve`` has, spelled and defaulted as it does (where the lab
    differs, the help says)."""
    a("--model", default=str(MODEL_DIR),
      help="model directory (tokenizer.json, tokenizer_config.json, config.json)")
    a("--served-model-name", nargs="+", default=None,
      help="model id(s) accepted in requests; the first is served by /v1/models "
           "(default: lab-copy)")
    a("--host", default="127.0.0.1", help="address to bind")
    a("--port", type=int, default=8000, help="port to bind")
    a("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=False,
      help="automatic prefix caching (off by default, as vLLM does for hybrid models)")
    a("--block-size", type=_pos_int, default=16, help="KV cache block size in tokens")
    a("--prefix-match-unit", type=_pos_int, default=None,
      help="hash unit for prefix-cache hits in tokens (a multiple of --block-size); hybrid "
           "geometry without it aligns hits to the state page block (2048 at k=3, 2176 at k=5/7)")
    a("--speculative-config", type=_json_arg("--speculative-config"), default=None,
      help='JSON: {"method": "mtp"|"dflash"|"ngram", "num_speculative_tokens": k}')
    a("-cc", "--compilation-config", type=_json_arg("--compilation-config"), default=None,
      help='JSON: {"cudagraph_mode": "NONE"|"PIECEWISE"|"FULL"|"FULL_DECODE_ONLY"|'
           '"FULL_AND_PIECEWISE"} (default FULL_AND_PIECEWISE), "max_cudagraph_capture_size":'
           ' N (default 512: a uniform decode batch of more tokens runs PIECEWISE)')
    a("--max-model-len", type=_pos_int, default=32768, help="max tokens per request")
    a("--kv-cache-memory-bytes", type=_size, default=None,
      help="KV cache memory in bytes; sizes the block pool (tokens = bytes // bytes per token) "
           "and the boot check. Default: a pool comfortably larger than --max-model-len")
    a("--max-num-batched-tokens", type=_pos_int, default=8192,
      help="token budget per scheduler step (chunked prefill)")
    a("--max-num-seqs", type=_pos_int, default=256, help="max running requests")
    a("--enable-prompt-tokens-details", action="store_true",
      help="report usage.prompt_tokens_details.cached_tokens")
    a("--api-key", default=None,
      help="require 'Authorization: Bearer KEY' on /v1/* (also read from VLLM_API_KEY)")
    a("--seed", type=int, default=0, help="seed of the drafters' deterministic imperfection")
    a("--num-gpu-blocks-override", type=_pos_int, default=None, metavar="N",
      help="the KV pool is N blocks, whatever the memory says (vLLM's flag; after the boot "
           "capacity check): a small pool where eviction is active")
    a("--async-scheduling", action=argparse.BooleanOptionalAction, default=None,
      help="vLLM's flag, recorded only: reported in the effective config; the lab schedules "
           "each step after the last one's outputs either way (docs/lab-engine.md)")


def _add_lab_flags(a) -> None:
    """The lab's own flags (the fix set, the geometry) and the faults tests inject; vLLM's
    ``--mamba-cache-mode``, sleep mode, stat logging and TP size among them."""
    a("--patches", type=_patches, default=PATCHES,
      help="lab only: fixes to apply: all, none, or a comma list of " + ", ".join(PATCHES))
    a("--geometry", choices=GEOMETRIES, default="hybrid",
      help="lab only: hybrid (recurrent state + attention, the thread's model) or dense")
    a("--mamba-cache-mode", choices=MAMBA_CACHE_MODES, default="all",
      help="hybrid prefix caching of the recurrent state, spelled as vLLM spells it. all: a "
           "state snapshot at every hash unit, no chunk alignment (the thread's stack: cold "
           "clean). align: as vLLM 0.26.0, prefill chunks end at page-block boundaries and at "
           "the prompt's last hash boundary, and MTP/DFlash hits drop their last matched unit "
           "(a cold prompt of length k+1 mod unit breaks too). none: no recurrent-state "
           "caching, so a hybrid gets no hits")
    a("--enable-sleep-mode", action="store_true",
      help="allocate the KV memory where POST /sleep?level=1 discards it (vLLM's flag; "
           "without it /sleep pauses and resets the prefix cache but discards nothing)")
    a("--fail-sleep-at", type=_pos_int, default=None, metavar="N",
      help="fault (for tests): the Nth sleep at level >= 1 fails as vLLM 0.26.0's did on a GPU "
           "shared with other servers (the worker's 'Memory usage increased after sleeping.': "
           "it compares the device's free memory before and after). The scheduler stays "
           "paused, the memory is discarded, the executor is not marked asleep, HTTP 500")
    a("--quiet-allocator", action="store_true",
      help="fault (for tests): a sleep does not log the allocator's 'CuMemAllocator: sleep "
           "freed ...' line, only the worker's 'Sleep mode freed X GiB memory' (as where "
           "vLLM's allocator logger is quieter than INFO)")
    a("--disable-log-stats", action="store_true",
      help="vLLM's flag: no stat logger, so /metrics serves no vllm:* metric (the counters, "
           "the pool gauges and the sleep-state gauge are all absent)")
    a("--compile-seed", type=int, default=int(os.environ.get("RESIDUE_LAB_COMPILE_SEED") or 0),
      help="lab only: which compile of the captured verify plan this server runs (the "
           "staging lanes' layout; env RESIDUE_LAB_COMPILE_SEED): correct rows read what they "
           "staged whatever the layout, a stale read reads other bytes; logged and served as "
           "the compile fingerprint")
    a("--tensor-parallel-size", "-tp", type=_pos_int, default=1,
      help="vLLM's flag, recorded only: the lab reports it (and CUDA_VISIBLE_DEVICES) in its "
           "effective config and refuses more than the visible devices, but computes every "
           "token in one CPU process; nothing is sharded")


_FROM_ENV = object()


def config_from_args(argv: list[str] | None = None, *,
                     parser_cls: type[argparse.ArgumentParser] = _Parser,
                     devices: Any = _FROM_ENV) -> LabConfig:
    """The server's configuration from its argv; ``devices``: its CUDA_VISIBLE_DEVICES
    (read from the environment unless given; None: unknown, not checked)."""
    p = build_parser(parser_cls)
    ns = p.parse_args(argv)
    spec = ns.speculative_config
    if spec is not None:
        method = spec.get("method")
        if method not in SPEC_METHODS:
            p.error(f"--speculative-config: method must be one of {', '.join(SPEC_METHODS)}, "
                    f"got {method!r}")
        k = spec.get("num_speculative_tokens")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
            p.error(f"--speculative-config: num_speculative_tokens must be an integer 1..64, "
                    f"got {k!r}")
        spec = {"method": method, "num_speculative_tokens": k,
                **{kk: v for kk, v in spec.items()
                   if kk in ("prompt_lookup_max", "prompt_lookup_min")}}
    mode = (ns.compilation_config or {}).get("cudagraph_mode", "FULL_AND_PIECEWISE")
    if isinstance(mode, str):
        mode = mode.upper()
    if mode not in CUDAGRAPH_MODES:
        p.error(f"--compilation-config: cudagraph_mode must be one of "
                f"{', '.join(CUDAGRAPH_MODES)}, got {mode!r}")
    capture = (ns.compilation_config or {}).get("max_cudagraph_capture_size", 512)
    if isinstance(capture, bool) or not isinstance(capture, int) or capture < 1:
        p.error(f"--compilation-config: max_cudagraph_capture_size must be a positive "
                f"integer, got {capture!r}")
    cfg = LabConfig(
        model=ns.model, served_model_name=(ns.served_model_name or ["lab-copy"])[0],
        served_model_aliases=tuple((ns.served_model_name or [])[1:]), host=ns.host,
        port=ns.port, enable_prefix_caching=ns.enable_prefix_caching, block_size=ns.block_size,
        prefix_match_unit=ns.prefix_match_unit, speculative_config=spec, cudagraph_mode=mode,
        max_cudagraph_capture_size=capture,
        max_model_len=ns.max_model_len, kv_cache_memory_bytes=ns.kv_cache_memory_bytes,
        max_num_batched_tokens=ns.max_num_batched_tokens, max_num_seqs=ns.max_num_seqs,
        enable_prompt_tokens_details=ns.enable_prompt_tokens_details,
        api_key=ns.api_key or os.environ.get("VLLM_API_KEY") or None, seed=ns.seed,
        patches=ns.patches, geometry=ns.geometry, mamba_cache_mode=ns.mamba_cache_mode,
        enable_sleep_mode=ns.enable_sleep_mode, fail_sleep_at=ns.fail_sleep_at,
        quiet_allocator=ns.quiet_allocator, disable_log_stats=ns.disable_log_stats,
        tensor_parallel_size=ns.tensor_parallel_size, compile_seed=ns.compile_seed,
        num_gpu_blocks_override=ns.num_gpu_blocks_override, async_scheduling=ns.async_scheduling,
        visible_devices=(os.environ.get("CUDA_VISIBLE_DEVICES") if devices is _FROM_ENV
                         else devices) or None)
    devices = [d for d in (cfg.visible_devices or "").split(",") if d.strip()]
    if devices and cfg.tensor_parallel_size > len(devices):
        p.error(f"--tensor-parallel-size {cfg.tensor_parallel_size}: larger than the "
                f"{len(devices)} device(s) of CUDA_VISIBLE_DEVICES={cfg.visible_devices}")
    if not (0 < cfg.port < 65536):
        p.error(f"--port must be 1..65535, got {cfg.port}")
    try:
        cfg.finalize()
    except ConfigError as e:
        p.error(str(e))
    return cfg


def main(argv: list[str] | None = None) -> None:
    from ._log import log

    try:
        cfg = config_from_args(argv)
    except CapacityError as e:
        log("ERROR", "core.py:718", "EngineCore failed to start.")
        sys.stderr.write(f"ValueError: {e}\n")
        raise SystemExit(1)
    log("INFO", "api_server.py:1885", f"vLLM API server version {VERSION} (residue-lab engine)")
    log("INFO", "utils.py:328", f"engine config: {json.dumps(cfg.effective(), default=str)}")
    from .serve import serve

    raise SystemExit(serve(cfg, T0))
