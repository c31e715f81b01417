"""What a vLLM server actually booted with, read from its startup log.

The requested configuration is not the effective one: vLLM resolves cudagraph modes
against the attention backend (and logs "setting cudagraph_mode=..."), grows the
attention block for hybrid models ("Setting attention block size to ..."), sizes the KV
pool from memory, and may refuse to boot. Every pattern below is built from the format
string in vLLM 0.27.1's source (file named next to it); 0.26.0 prints the same lines.
Lines may carry a process prefix (``(EngineCore pid=..)``) and ANSI colours; both are
ignored. Unknown or absent lines leave their key out, never guess.
"""
from __future__ import annotations

import json
import re
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# v1/engine/core.py: "Initializing a V1 LLM engine (v%s) with config: %s" (VllmConfig.__str__)
# vllm/config/vllm.py (VllmConfig.__post_init__): the warnings with which vLLM turns
# asynchronous scheduling off (an unsupported drafter such as ngram, an executor, ...)
_ASYNC_OFF = re.compile(r"Async scheduling (?:not supported|is not compatible|will be "
                        r"disabled|is disabled)[^\n]*")
_INIT = re.compile(r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\) with config: (?P<cfg>.*)$")
# config/vllm.py VllmConfig.__str__ fields
_CFG_MODEL = re.compile(r"(?:^|, )model='(?P<v>[^']*)'")
_CFG_MAX_SEQ = re.compile(r"max_seq_len=(?P<v>\d+)")
_CFG_PREFIX = re.compile(r"enable_prefix_caching=(?P<v>True|False)")
_CFG_CHUNKED = re.compile(r"enable_chunked_prefill=(?P<v>True|False)")
_CFG_SEED = re.compile(r"seed=(?P<v>None|-?\d+)")
_CFG_TP = re.compile(r"(?:^|, )tensor_parallel_size=(?P<v>\d+)")
_CFG_SERVED = re.compile(r"served_model_name=(?P<v>[^,]*),")
# config/speculative.py SpeculativeConfig.__repr__:
#   f"SpeculativeConfig({method=}, {model=}, {num_spec_tokens=})"
_CFG_SPEC = re.compile(
    r"speculative_config=(?:None|SpeculativeConfig\(method='?(?P<method>[^',]*)'?, "
    r"model=(?P<model>None|'[^']*'), num_spec_tokens=(?P<k>\d+|None)\))")
# config/compilation.py CompilationConfig.__repr__: str(dict) with enum reprs, e.g.
#   'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>
_CFG_CG = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(?P<v>\w+)")
# config/compilation.py: "...; setting cudagraph_mode=PIECEWISE" (backend downgrade)
# config/vllm.py: "Overriding cudagraph_mode to PIECEWISE." ; "Setting cudagraph_mode to FULL."
_CG_CHANGE = re.compile(r"(?:setting cudagraph_mode=|[Oo]verriding cudagraph_mode to "
                        r"|Setting cudagraph_mode to )(?P<v>[A-Z_]+)")
# v1/core/kv_cache_utils.py: "GPU KV cache size: %s tokens" (%s = f"{n:,}")
_KV_TOKENS = re.compile(r"GPU KV cache size: (?P<v>[\d,]+) tokens")
# "Maximum concurrency for %s tokens per request: %.2fx"
_CONCURRENCY = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: "
                          r"(?P<x>[\d.]+)x")
# v1/worker/gpu_worker.py: "Available KV cache memory: %s GiB"
_KV_MEM = re.compile(r"Available KV cache memory: (?P<v>[\d.]+) GiB")
# platforms/interface.py (hybrid models)
_ATTN_BLOCK = re.compile(r"Setting attention block size to (?P<v>\d+) tokens")
_MAMBA_PAD = re.compile(r"Padding mamba page size by (?P<v>[\d.]+)%")
# Which model runner the worker built (same strings in 0.26.0 .. 0.33.0):
# v1/worker/gpu_worker.py: logger.info_once("Using V2 Model Runner") when it builds V2;
_V2_RUNNER = re.compile(r"Using V2 Model Runner")
# config/vllm.py use_v2_model_runner: "Model Runner V2 does not yet support %s; using the
# V1 model runner instead." / "Model Runner V2 requires Triton; using the V1 model runner
# instead." (the release's default fell back to V1, and why);
_V1_FALLBACK = re.compile(r"Model Runner V2 (?P<why>does not yet support .*?|requires Triton)"
                          r"; using the V1 model runner instead")
# the V1 runner's own module logs as [gpu_model_runner.py:N] (e.g. "Starting to load model",
# seen in every H200 0.26.0 log); V2's lives in v1/worker/gpu/model_runner.py.
_V1_MODULE = re.compile(r"\[gpu_model_runner\.py:\d+\]")
# v1/worker/gpu_model_runner.py / gpu/cudagraph_utils.py progress bars:
#   "Capturing CUDA graphs (decode, FULL)" / "(mixed prefill-decode, PIECEWISE)"
_CAPTURE = re.compile(r"Capturing CUDA graphs \((?P<kind>[^,)]+), (?P<mode>[A-Z_]+)\)")
# entrypoints/serve/utils/api_utils.py: "non-default args: %s" (a dict repr)
_NON_DEFAULT = re.compile(r"non-default args: (?P<v>\{.*\})")
_ARG_INT = {name: re.compile(rf"'{name}': (?P<v>\d+|None)")
            for name in ("block_size", "prefix_match_unit", "max_model_len",
                         "kv_cache_memory_bytes", "max_num_batched_tokens")}
# config/scheduler.py: the chunked-prefill budget the scheduler runs with (the modulus of
# a chunk-budget tail, docs/shapes.md)
_BUDGET = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(?P<v>\d+)")
# --enable-sleep-mode (a bool, in the same dict): --isolation restore needs it
_ARG_SLEEP = re.compile(r"'enable_sleep_mode': (?P<v>True|False)")
# v1/core/kv_cache_utils.py boot refusal (DESIGN §1 'Boot capacity')
_KV_REFUSAL = re.compile(
    r"To serve at least one request with the model's max seq len \((?P<len>\d+)\), "
    r"\(?(?P<need>[\d.]+) GiB KV cache is needed, which is larger than the available KV "
    r"cache memory \((?P<avail>[\d.]+) GiB\)")
# engine/vllm/patches: "residue-lab patches: {json}" logged by the plugin in each process
_PATCHES = re.compile(r"residue-lab patches: (?P<v>\{.*\})")


def _last(pattern: re.Pattern[str], lines: list[str]) -> re.Match[str] | None:
    for line in reversed(lines):
        m = pattern.search(line)
        if m:
            return m
    return None


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_effective_config(log_text: str) -> dict[str, Any]:
    """The configuration a vLLM server reports in its startup log.

    Keys (present only when the log says so): ``vllm_version``, ``model``,
    ``served_model_name``, ``max_model_len``, ``prefix_caching``, ``chunked_prefill``,
    ``seed``, ``speculative_config`` (``{"method", "num_speculative_tokens", "model"}`` or
    ``None`` when off), ``cudagraph_mode`` (after any downgrade), ``cudagraph_mode_requested``
    (from the engine config line, when a later line changed it), ``cudagraph_captures``
    (``[[kind, mode], ...]``), ``kv_cache_tokens``, ``max_concurrency``,
    ``kv_cache_memory_gib``, ``block_size`` (attention block after hybrid promotion, else
    the one requested), ``prefix_match_unit`` (as requested; vLLM does not log a resolved
    one), ``mamba_page_padding_pct``, ``max_num_batched_tokens`` (the chunked-prefill budget
    logged by the scheduler config, else as requested), ``model_runner`` (``v1``/``v2``, with
    ``model_runner_evidence`` and, on a fallback, vLLM's ``model_runner_reason``), ``async_scheduling``
    (``off`` where vLLM logged that it turned it off, with ``async_scheduling_why``), ``patch_status``
    (the plugin's status map; not ``patches``, which names the requested selection), ``boot_error`` (the KV-capacity refusal, parsed).
    """
    text = _ANSI.sub("", log_text or "")
    lines = text.splitlines()
    out: dict[str, Any] = {}   # keys in the order the log's sections give them
    requested = _requested(lines, out)
    init = _last(_INIT, lines)
    if init:
        _engine_config(init, out)
    _cudagraph(lines, init, out)
    _capacity(lines, requested, out)
    out.update(_model_runner(lines, "kv_cache_tokens" in out))
    if m := _last(_PATCHES, lines):
        try:
            out["patch_status"] = json.loads(m["v"])
        except ValueError:
            out["patch_status"] = {"unparsed": m["v"]}
    if m := _last(_ASYNC_OFF, lines):   # config/vllm.py: asked for or not, turned off
        out["async_scheduling"] = "off"
        out["async_scheduling_why"] = m.group(0).strip()
    if m := _last(_KV_REFUSAL, lines):
        out["boot_error"] = {
            "kind": "kv-capacity",
            "max_model_len": int(m["len"]),
            "needed_gib": float(m["need"]),
            "available_gib": float(m["avail"]),
            "line": m.string.strip(),
        }
    return out


def _requested(lines: list[str], out: dict[str, Any]) -> dict[str, int | None]:
    """The integer flags the non-default args line lists; ``enable_sleep_mode`` into ``out``."""
    args = _last(_NON_DEFAULT, lines)
    requested: dict[str, int | None] = {}
    if args:
        for name, pat in _ARG_INT.items():
            m = pat.search(args["v"])
            if m:
                requested[name] = None if m["v"] == "None" else int(m["v"])
        # only non-default args are listed: absent means vLLM's default, off
        m = _ARG_SLEEP.search(args["v"])
        out["enable_sleep_mode"] = bool(m and m["v"] == "True")
    return requested


def _engine_config(init: re.Match, out: dict[str, Any]) -> None:
    """What the engine's config line says (version, model, lengths, caching, spec, mode)."""
    out["vllm_version"] = init["version"]
    cfg = init["cfg"]
    if m := _CFG_MODEL.search(cfg):
        out["model"] = m["v"]
    if m := _CFG_SERVED.search(cfg):
        out["served_model_name"] = m["v"]
    if m := _CFG_MAX_SEQ.search(cfg):
        out["max_model_len"] = int(m["v"])
    if m := _CFG_PREFIX.search(cfg):
        out["prefix_caching"] = m["v"] == "True"
    if m := _CFG_CHUNKED.search(cfg):
        out["chunked_prefill"] = m["v"] == "True"
    if m := _CFG_SEED.search(cfg):
        out["seed"] = None if m["v"] == "None" else int(m["v"])
    if (m := _CFG_TP.search(cfg)) and int(m["v"]) > 1:   # --gpus 0+1: the server's TP
        out["tensor_parallel_size"] = int(m["v"])
    if m := _CFG_SPEC.search(cfg):
        if m["method"] is None:
            out["speculative_config"] = None
        else:
            k = m["k"]
            model = m["model"]
            out["speculative_config"] = {
                "method": m["method"],
                "num_speculative_tokens": None if k == "None" else int(k),
                "model": None if model == "None" else model.strip("'"),
            }
    if m := _CFG_CG.search(cfg):
        out["cudagraph_mode"] = m["v"]


def _cudagraph(lines: list[str], init: re.Match | None, out: dict[str, Any]) -> None:
    """The mode after any later change (it wins over the config line) and the captures."""
    after = lines[_index_of(lines, init.string) + 1:] if init else lines
    change = _last(_CG_CHANGE, after)
    if change:
        if "cudagraph_mode" in out and out["cudagraph_mode"] != change["v"]:
            out["cudagraph_mode_requested"] = out["cudagraph_mode"]
        out["cudagraph_mode"] = change["v"]
    captures = []
    for line in lines:
        m = _CAPTURE.search(line)
        if m and [m["kind"], m["mode"]] not in captures:
            captures.append([m["kind"], m["mode"]])
    if captures:
        out["cudagraph_captures"] = captures


def _capacity(lines: list[str], requested: dict[str, int | None], out: dict[str, Any]) -> None:
    """KV cache size and concurrency, the block, match unit and chunk budget, mamba padding."""
    if m := _last(_KV_TOKENS, lines):
        out["kv_cache_tokens"] = _int(m["v"])
    if m := _last(_CONCURRENCY, lines):
        out["max_concurrency"] = float(m["x"])
        out.setdefault("max_model_len", _int(m["len"]))
    if m := _last(_KV_MEM, lines):
        out["kv_cache_memory_gib"] = float(m["v"])
    if m := _last(_ATTN_BLOCK, lines):
        out["block_size"] = int(m["v"])
    elif requested.get("block_size") is not None:
        out["block_size"] = requested["block_size"]
    if "prefix_match_unit" in requested:
        out["prefix_match_unit"] = requested["prefix_match_unit"]
    if m := _last(_BUDGET, lines):
        out["max_num_batched_tokens"] = int(m["v"])
    elif requested.get("max_num_batched_tokens") is not None:
        out["max_num_batched_tokens"] = requested["max_num_batched_tokens"]
    if m := _last(_MAMBA_PAD, lines):
        out["mamba_page_padding_pct"] = float(m["v"])


def _model_runner(lines: list[str], pool_sized: bool) -> dict[str, str]:
    """``model_runner`` (v1/v2), ``model_runner_evidence`` (the line kind it rests on) and,
    where vLLM said why it fell back to V1, ``model_runner_reason``."""
    out: dict[str, str] = {}
    if m := _last(_V1_FALLBACK, lines):
        out["model_runner_reason"] = m["why"]
    if _last(_V2_RUNNER, lines):
        out.update(model_runner="v2", model_runner_evidence="Using V2 Model Runner")
    elif "model_runner_reason" in out:
        out.update(model_runner="v1", model_runner_evidence="V2 fallback warning")
    elif _last(_V1_MODULE, lines):
        out.update(model_runner="v1", model_runner_evidence="gpu_model_runner.py log lines")
    elif pool_sized:
        # The V2 line is logged when the worker builds its runner, before the KV pool is
        # sized: a log that got as far as the pool without it ran the V1 runner.
        out.update(model_runner="v1", model_runner_evidence="KV pool sized, no V2 line")
    return out


def patch_status_from_log(log_text: str) -> dict[str, str] | None:
    """The patch map the plugin logged (``residue-lab patches: {...}``), or ``None`` when
    the log has no such line (plugin not installed / not discovered, or boot died first)."""
    text = _ANSI.sub("", log_text or "")
    m = _last(_PATCHES, text.splitlines())
    if not m:
        return None
    try:
        return json.loads(m["v"])
    except ValueError:
        return {"unparsed": m["v"]}


def _index_of(lines: list[str], line: str) -> int:
    for i in range(len(lines) - 1, -1, -1):
        if lines[i] == line:
            return i
    return -1


def compare_effective(requested: dict[str, Any], effective: dict[str, Any]) -> list[str]:
    """Human lines for every field where the server differs from the request.

    ``requested`` is ``ServingConfig.identity()`` (or a dict with the same keys).
    """
    out: list[str] = []
    pairs = [("max_model_len", "max_model_len"), ("prefix_caching", "prefix_caching"),
             ("cudagraph_mode", "cudagraph_mode"), ("block_size", "block_size"),
             ("prefix_match_unit", "prefix_match_unit")]
    for req_key, eff_key in pairs:
        if eff_key in effective and req_key in requested \
                and effective[eff_key] != requested[req_key]:
            out.append(f"{req_key}: requested {requested[req_key]!r}, "
                       f"server runs {effective[eff_key]!r}")
    if "speculative_config" in effective:
        eff = effective["speculative_config"]
        want_method = requested.get("method")
        want_k = requested.get("draft_tokens") if want_method else None
        got_method = eff["method"] if eff else None
        got_k = eff["num_speculative_tokens"] if eff else None
        if (want_method, want_k) != (got_method, got_k):
            out.append(f"speculative: requested {want_method} k={want_k}, "
                       f"server runs {got_method} k={got_k}")
    return out
