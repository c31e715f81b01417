"""parse_effective_config on startup logs built from vLLM 0.27.1's own format strings.

Each line below is the ``logger.*`` format string of the named source file, filled in the
way vLLM fills it (``VllmConfig.__str__`` field order, ``SpeculativeConfig.__repr__``'s
``f"{method=}"`` form, ``CompilationConfig.__repr__`` as a dict repr with enum reprs). One
test renders the compilation config with the real installed vLLM class, so a change in
its repr shows up here.
"""
from __future__ import annotations

import os

import pytest

from tests._vllm import require_vllm

from engine.vllm.effective import (compare_effective, parse_effective_config,
                                   patch_status_from_log)

PFX = "(EngineCore pid=4242) INFO 08-22 10:00:{:02d} [{}] "
API = "(APIServer pid=4200) INFO 08-22 10:00:{:02d} [{}] "


def spec_repr(method, model, num_spec_tokens):
    # config/speculative.py: f"SpeculativeConfig({method=}, {model=}, {num_spec_tokens=})"
    return f"SpeculativeConfig({method=}, {model=}, {num_spec_tokens=})"


def compilation_repr(mode, enum_value):
    # config/compilation.py: str(dict) of the dumped config; the enum keeps its repr
    return ("{'mode': <CompilationMode.VLLM_COMPILE: 3>, 'debug_dump_path': None, "
            "'cache_dir': '', 'backend': 'inductor', 'custom_ops': ['none'], "
            "'splitting_ops': ['vllm::unified_attention'], "
            "'inductor_compile_config': {'enable_auto_functionalized_v2': False}, "
            f"'cudagraph_mode': <CUDAGraphMode.{mode}: {enum_value}>, "
            "'cudagraph_capture_sizes': [1, 2, 4, 8], 'pass_config': {}, "
            "'max_cudagraph_capture_size': 8}")


def engine_config_line(*, spec, compilation, max_len=245760, prefix=True, model="/models/q"):
    # config/vllm.py VllmConfig.__str__ (field order as in 0.27.1)
    cfg = (f"model={model!r}, speculative_config={spec}, tokenizer={model!r}, "
           "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
           "tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
           f"max_seq_len={max_len}, download_dir=None, load_format=auto, "
           "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, "
           "decode_context_parallel_size=1, dcp_comm_backend=ag_rs, "
           "disable_custom_all_reduce=False, quantization=None, quantization_config=None, "
           "enforce_eager=False, enable_return_routed_experts=False, kv_cache_dtype=auto, "
           "device_config=cuda, structured_outputs_config=StructuredOutputsConfig(), "
           "observability_config=ObservabilityConfig(), seed=0, "
           f"served_model_name={model}, enable_prefix_caching={prefix}, "
           "enable_chunked_prefill=True, pooler_config=None, "
           f"compilation_config={compilation}, kernel_config=KernelConfig()")
    # v1/engine/core.py
    return PFX.format(5, "core.py:122") + \
        f"Initializing a V1 LLM engine (v0.27.1) with config: {cfg}"


def boot_log(*, spec, compilation, extra=(), max_len=245760, prefix=True, kv_tokens=223974):
    lines = [
        # entrypoints/serve/utils/api_utils.py
        API.format(1, "api_utils.py:273") + "non-default args: {'model': '/models/q', "
        "'port': 8123, 'max_model_len': %d, 'block_size': 128, 'prefix_match_unit': 128, "
        "'enable_prefix_caching': True, 'kv_cache_memory_bytes': 5261334937, "
        "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}, "
        "'compilation_config': {'cudagraph_mode': 'PIECEWISE'}}" % max_len,
        engine_config_line(spec=spec, compilation=compilation, max_len=max_len, prefix=prefix),
        # v1/worker/gpu_worker.py
        PFX.format(6, "gpu_worker.py:385") + "Using V2 Model Runner",
        # engine/vllm/patches (the plugin)
        PFX.format(6, "__init__.py:171") + 'residue-lab patches: {"prefill-discriminator": '
        '"applied", "sliding-window-guard": "applied"}',
        *extra,
        # v1/worker/gpu_worker.py
        PFX.format(20, "gpu_worker.py:564") + "Available KV cache memory: 4.9 GiB",
        # v1/core/kv_cache_utils.py
        PFX.format(20, "kv_cache_utils.py:2235") + f"GPU KV cache size: {kv_tokens:,} tokens",
        PFX.format(20, "kv_cache_utils.py:2237") +
        "Maximum concurrency for %s tokens per request: %.2fx" % (f"{max_len:,}", 1.01),
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████| 49/49",
    ]
    return "\n".join(lines) + "\n"


def test_mtp_huge_boot():
    log = boot_log(spec=spec_repr("mtp", None, 3), compilation=compilation_repr("PIECEWISE", 1))
    eff = parse_effective_config(log)
    assert eff["vllm_version"] == "0.27.1"
    assert eff["model"] == "/models/q" and eff["max_model_len"] == 245760
    assert eff["prefix_caching"] is True and eff["chunked_prefill"] is True
    assert eff["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3,
                                         "model": None}
    assert eff["cudagraph_mode"] == "PIECEWISE" and "cudagraph_mode_requested" not in eff
    assert eff["cudagraph_captures"] == [["mixed prefill-decode", "PIECEWISE"]]
    assert eff["kv_cache_tokens"] == 223974 and eff["max_concurrency"] == 1.01
    assert eff["kv_cache_memory_gib"] == 4.9
    assert eff["block_size"] == 128 and eff["prefix_match_unit"] == 128
    assert eff["model_runner"] == "v2" and eff["seed"] == 0
    assert eff["patch_status"] == {"prefill-discriminator": "applied",
                              "sliding-window-guard": "applied"}
    assert "boot_error" not in eff


def test_downgrade_after_the_config_line_wins_and_is_reported():
    downgrade = PFX.format(9, "compilation.py:1411") + (
        "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention "
        "backend FLASH_ATTN (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE)"
        "; setting cudagraph_mode=PIECEWISE")
    log = boot_log(spec=spec_repr("dflash", "/models/drafter", 7),
                   compilation=compilation_repr("FULL_AND_PIECEWISE", "(2, 1)"),
                   extra=[downgrade])
    eff = parse_effective_config(log)
    assert eff["cudagraph_mode"] == "PIECEWISE"
    assert eff["cudagraph_mode_requested"] == "FULL_AND_PIECEWISE"
    assert eff["speculative_config"] == {"method": "dflash", "num_speculative_tokens": 7,
                                         "model": "/models/drafter"}


def test_hybrid_block_promotion_and_v1_runner():
    promo = [
        # platforms/interface.py
        PFX.format(7, "interface.py:912") + "Setting attention block size to 2176 tokens "
        "to ensure that attention page size is >= mamba page size.",
        PFX.format(7, "interface.py:936") + "Padding mamba page size by 1.47% to ensure "
        "that mamba page size and attention page size are exactly equal.",
    ]
    log = boot_log(spec="None", compilation=compilation_repr("FULL_AND_PIECEWISE", "(2, 1)"),
                   extra=promo, prefix=False).replace("Using V2 Model Runner", "")
    eff = parse_effective_config(log)
    assert eff["block_size"] == 2176 and eff["mamba_page_padding_pct"] == 1.47
    assert eff["speculative_config"] is None and eff["prefix_caching"] is False
    assert eff["model_runner"] == "v1"


def test_kv_capacity_refusal():
    # v1/core/kv_cache_utils.py, the thread's DFLASH_TOKENS=15 boot failure
    err = ("ValueError: To serve at least one request with the model's max seq len (245760), "
           "(5.16 GiB KV cache is needed, which is larger than the available KV cache memory "
           "(4.9 GiB). Based on the available memory, the estimated maximum model length is "
           "233000. Try increasing `gpu_memory_utilization` ...")
    log = engine_config_line(spec=spec_repr("dflash", "/d", 15),
                             compilation=compilation_repr("PIECEWISE", 1)) + "\n" + err
    eff = parse_effective_config(log)
    assert eff["boot_error"]["kind"] == "kv-capacity"
    assert eff["boot_error"]["needed_gib"] == 5.16 and eff["boot_error"]["available_gib"] == 4.9
    assert eff["boot_error"]["max_model_len"] == 245760
    assert "kv_cache_tokens" not in eff and "model_runner" not in eff


def test_empty_and_garbage_logs_say_nothing():
    assert parse_effective_config("") == {}
    assert parse_effective_config("\x1b[32mhello\x1b[0m\nworld") == {}
    assert patch_status_from_log("nothing here") is None


def test_ansi_colours_are_ignored():
    log = boot_log(spec=spec_repr("mtp", None, 3), compilation=compilation_repr("PIECEWISE", 1))
    coloured = log.replace("INFO", "\x1b[32mINFO\x1b[0m")
    assert parse_effective_config(coloured) == parse_effective_config(log)


def test_compare_with_the_request():
    from engine.presets import resolve

    cfg = resolve("mtp", "huge", engine="vllm", cudagraph_mode="FULL_AND_PIECEWISE")
    downgrade = PFX.format(9, "compilation.py:1411") + "x; setting cudagraph_mode=PIECEWISE"
    eff = parse_effective_config(boot_log(
        spec=spec_repr("mtp", None, 3),
        compilation=compilation_repr("FULL_AND_PIECEWISE", "(2, 1)"), extra=[downgrade]))
    diffs = compare_effective(cfg.identity(), eff)
    assert diffs == ["cudagraph_mode: requested 'FULL_AND_PIECEWISE', server runs 'PIECEWISE'"]


def test_real_compilation_config_repr_is_parsed():
    require_vllm(module_level=False)
    from vllm.config import CompilationConfig

    for mode in ("PIECEWISE", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "NONE", "FULL"):
        real = repr(CompilationConfig(cudagraph_mode=mode))
        eff = parse_effective_config(engine_config_line(spec="None", compilation=real))
        assert eff["cudagraph_mode"] == mode, real


# ---------------------------------------------------------------- the runner a server ran on
H200_LOGS = os.path.join(os.path.dirname(__file__), "..", "..", "reports", "h200", "logs")


def h200_log(prefix):
    import glob
    import gzip

    paths = sorted(glob.glob(os.path.join(H200_LOGS, prefix + "*.log.gz")))
    if not paths:
        pytest.skip(f"no committed H200 log {prefix}*")
    with gzip.open(paths[0], "rt", errors="replace") as fh:
        return fh.read()


def test_real_hybrid_log_ran_on_v1():
    """vLLM 0.26.0 on the H200, tiny hybrid + ngram: no V2 line, the V1 runner's module
    logs the model load ([gpu_model_runner.py:5250] Starting to load model ...)."""
    eff = parse_effective_config(h200_log("fresh_FULL_AND_PIECEWISE__"))
    assert eff["vllm_version"] == "0.26.0"
    assert (eff["model_runner"], eff["model_runner_evidence"]) == \
        ("v1", "gpu_model_runner.py log lines")
    assert "model_runner_reason" not in eff  # a hybrid is not a default-V2 model at all


def test_real_dense_ngram_log_names_the_fallback():
    """Dense + ngram: the default would be V2; config/vllm.py warns and falls back."""
    eff = parse_effective_config(h200_log("dense_reset_FULL_AND_PIECEWISE_all__"))
    assert eff["model_runner"] == "v1"
    assert eff["model_runner_reason"] == \
        "does not yet support ngram/ngram_gpu speculative decoding"


def test_v2_line_wins_and_no_runner_line_says_nothing():
    log = boot_log(spec="None", compilation=compilation_repr("PIECEWISE", "(1, 1)"))
    eff = parse_effective_config(log)
    assert (eff["model_runner"], eff["model_runner_evidence"]) == ("v2", "Using V2 Model Runner")
    triton = API.format(2, "vllm.py:574") + ("Model Runner V2 requires Triton; using the V1 "
                                             "model runner instead.")
    assert parse_effective_config(triton) == {"model_runner": "v1",
                                              "model_runner_evidence": "V2 fallback warning",
                                              "model_runner_reason": "requires Triton"}
    assert "model_runner" not in parse_effective_config(API.format(1, "x.py:1") + "hello")
