"""Launcher: every preset becomes a vLLM command; vLLM 0.27.1's own parser accepts it.

The first half needs no vLLM (the launcher must print anywhere). The parser half imports
the real pinned vLLM: skipped where it is not installed, a failure when
RESIDUE_LAB_REQUIRE_VLLM=1 (CI).
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from tests._vllm import require_vllm

from engine.presets import CTXS, SPECS, resolve
from engine.vllm.launch import (HybridOptions, LaunchError, build_command, build_launch,
                                write_plugin_dist_info)

MODEL = "/models/tiny"
DRAFT = "/models/dflash-drafter"


def preset_cases():
    for spec, ctx in itertools.product(SPECS, CTXS):
        yield spec, ctx, {}
    yield "mtp", "huge", {"prefix_caching": False}
    yield "dflash2", "huge", {"draft_tokens": 15}
    yield "mtp", "huge", {"cudagraph_mode": "FULL_AND_PIECEWISE"}


CASES = list(preset_cases())
IDS = [f"{s}-{c}" + "".join(f"-{k}={v}" for k, v in o.items()) for s, c, o in CASES]


def argv_for(spec, ctx, overrides, **kw):
    cfg = resolve(spec, ctx, engine="vllm", model=MODEL, **overrides)
    argv, env = build_command(cfg, port=8123, model=MODEL, draft_model=DRAFT, **kw)
    return cfg, argv, env


def flag(argv, name):
    i = argv.index(name)
    return argv[i + 1]


@pytest.mark.parametrize("spec,ctx,overrides", CASES, ids=IDS)
def test_every_preset_builds_a_command(spec, ctx, overrides):
    cfg, argv, env = argv_for(spec, ctx, overrides)
    assert argv[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert flag(argv, "--model") == MODEL and flag(argv, "--port") == "8123"
    assert flag(argv, "--host") == "127.0.0.1"
    assert int(flag(argv, "--max-model-len")) == cfg.max_model_len
    assert int(flag(argv, "--block-size")) == cfg.block_size
    assert json.loads(flag(argv, "--compilation-config")) == {"cudagraph_mode": cfg.cudagraph_mode}
    assert "--enable-prompt-tokens-details" in argv and flag(argv, "--seed") == "0"
    assert ("--enable-prefix-caching" in argv) == cfg.prefix_caching
    assert ("--no-enable-prefix-caching" in argv) == (not cfg.prefix_caching)
    if cfg.prefix_match_unit:
        assert int(flag(argv, "--prefix-match-unit")) == cfg.prefix_match_unit
    else:
        assert "--prefix-match-unit" not in argv
    if cfg.method:
        sc = json.loads(flag(argv, "--speculative-config"))
        assert sc["method"] == cfg.method and sc["num_speculative_tokens"] == cfg.draft_tokens
    else:
        assert "--speculative-config" not in argv
    assert env["RESIDUE_LAB_PATCHES"] == "all" and env["VLLM_NO_USAGE_STATS"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_thread_decisions_reach_the_command():
    _, argv, _ = argv_for("mtp", "huge", {})
    assert json.loads(flag(argv, "--compilation-config"))["cudagraph_mode"] == "PIECEWISE"
    assert flag(argv, "--prefix-match-unit") == "128" and flag(argv, "--block-size") == "128"
    assert flag(argv, "--kv-cache-memory-bytes") == str(int(4.9 * 1024**3))
    _, argv, _ = argv_for("dflash2", "huge", {"draft_tokens": 15})
    assert flag(argv, "--max-model-len") == "221184"
    spec = json.loads(flag(argv, "--speculative-config"))
    assert spec == {"method": "dflash", "num_speculative_tokens": 15, "model": DRAFT}
    _, argv, _ = argv_for("ngram", "fast", {})
    assert json.loads(flag(argv, "--speculative-config"))["prompt_lookup_max"] == 4


def test_dflash_without_a_drafter_is_an_error():
    cfg = resolve("dflash2", "huge", engine="vllm")
    with pytest.raises(LaunchError, match="drafter"):
        build_command(cfg, port=1, model=MODEL)


def test_env_gpu_patches_and_hybrid_flags(tmp_path):
    cfg = resolve("mtp", "huge", engine="vllm", patches="none")
    argv, env = build_command(cfg, port=9, model=MODEL, gpu="3",
                              hybrid=HybridOptions(language_model_only=True),
                              extra_args=["--gpu-memory-utilization", "0.2"],
                              served_model_name="tiny", plugin_path=tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["RESIDUE_LAB_PATCHES"] == "none"
    assert flag(argv, "--mamba-cache-mode") == "align"
    assert flag(argv, "--gdn-prefill-backend") == "triton"
    assert "--language-model-only" in argv and flag(argv, "--served-model-name") == "tiny"
    assert argv[-2:] == ["--gpu-memory-utilization", "0.2"]
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
    # geometry drives the hybrid flags when not given explicitly
    hyb = resolve("mtp", "huge", engine="vllm", geometry="hybrid")
    assert "--mamba-cache-mode" in build_command(hyb, port=9, model=MODEL)[0]
    assert "--mamba-cache-mode" not in build_command(hyb, port=9, model=MODEL, hybrid=False)[0]
    # no prefix caching: align mode is pointless and not passed
    off = resolve("mtp", "huge", engine="vllm", prefix_caching=False)
    assert "--mamba-cache-mode" not in build_command(off, port=9, model=MODEL, hybrid=True)[0]


def _checkpoint(d, *, vision_config, names):
    """A local checkpoint with a real safetensors header naming ``names`` (no tensors need
    real data for the launcher: it reads the header only)."""
    import struct
    d.mkdir()
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5"}
    if vision_config:
        cfg["vision_config"] = {"depth": 1}
    (d / "config.json").write_text(json.dumps(cfg))
    header = {n: {"dtype": "BF16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]}
              for i, n in enumerate(names)}
    raw = json.dumps(header).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 2 * len(names))
    return d


def test_language_model_only_follows_the_checkpoint(tmp_path):
    """--language-model-only where the checkpoint needs it: a multimodal layout without
    vision weights (the committed tiny hybrid is one); not for a full multimodal checkpoint,
    a plain text one, or a hub id; never twice."""
    from pathlib import Path
    from engine.vllm.checkpoint import language_model_only_reason
    cfg = resolve("ngram", "huge", engine="vllm", geometry="hybrid")
    text_mm = _checkpoint(tmp_path / "text_mm", vision_config=True,
                          names=["model.language_model.embed_tokens.weight", "lm_head.weight"])
    full_mm = _checkpoint(tmp_path / "full_mm", vision_config=True,
                          names=["model.language_model.embed_tokens.weight",
                                 "model.visual.patch_embed.proj.weight"])
    plain = _checkpoint(tmp_path / "plain", vision_config=False, names=["model.norm.weight"])
    launch = build_launch(cfg, port=9, model=str(text_mm))
    assert launch.argv.count("--language-model-only") == 1
    assert any("no vision-tower weights" in n for n in launch.notes)
    for model in (full_mm, plain, MODEL):
        assert "--language-model-only" not in build_launch(cfg, port=9, model=str(model)).argv
    given = build_launch(cfg, port=9, model=str(text_mm), extra_args=["--language-model-only"])
    assert given.argv.count("--language-model-only") == 1
    committed = Path(__file__).resolve().parents[2] / "engine" / "tinymodel" / "weights" / "hybrid"
    assert "Qwen3_5ForConditionalGeneration" in language_model_only_reason(committed)


def test_launch_spec_shell_line_and_notes():
    cfg = resolve("mtp", "huge", engine="vllm")
    launch = build_launch(cfg, port=8000, model=MODEL)
    assert "RESIDUE_LAB_PATCHES=all" in launch.shell()
    assert "'{\"method\":\"mtp\",\"num_speculative_tokens\":3}'" in launch.shell()
    assert any("PIECEWISE" in n for n in launch.notes)


def test_cli_prints_without_importing_vllm():
    code = ("import sys, runpy; sys.argv=['x','--spec','mtp','--ctx','huge','--model','/m'];"
            "\ntry:\n    runpy.run_module('engine.vllm', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'vllm' not in sys.modules, 'the launcher imported vLLM'")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--prefix-match-unit 128" in out.stdout and "PIECEWISE" in out.stdout
    assert "correctness constraint" in out.stdout


def test_plugin_dist_info_is_discoverable(tmp_path, monkeypatch):
    from importlib.metadata import entry_points

    write_plugin_dist_info(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [e for e in entry_points(group="vllm.general_plugins")
           if e.name == "residue_lab_patches"]
    assert eps and eps[0].value == "engine.vllm.patches:register"


# ---------------------------------------------------------------- the real parser
@pytest.fixture(scope="module")
def vllm_parser():
    require_vllm()
    import vllm.platforms as platforms
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    saved = platforms._current_platform
    platforms._current_platform = CpuPlatform()  # make_arg_parser needs a platform
    try:
        yield make_arg_parser(FlexibleArgumentParser())
    finally:
        platforms._current_platform = saved


@pytest.mark.parametrize("spec,ctx,overrides", CASES, ids=IDS)
@pytest.mark.parametrize("hybrid", [False, True], ids=["dense", "hybrid"])
def test_vllm_parser_accepts_preset_argv(vllm_parser, spec, ctx, overrides, hybrid):
    cfg, argv, _ = argv_for(spec, ctx, overrides, hybrid=hybrid)
    ns = vllm_parser.parse_args(argv[3:])  # drop "python -m module"
    assert ns.model == MODEL and ns.port == 8123
    assert ns.enable_prefix_caching is cfg.prefix_caching
    assert ns.block_size == cfg.block_size
    assert ns.prefix_match_unit == cfg.prefix_match_unit
    assert ns.max_model_len == cfg.max_model_len
    assert ns.kv_cache_memory_bytes == cfg.kv_cache_memory_bytes
    assert ns.enable_prompt_tokens_details is True and ns.seed == 0
    cg = ns.compilation_config
    mode = cg["cudagraph_mode"] if isinstance(cg, dict) else cg.cudagraph_mode
    assert getattr(mode, "name", mode) == cfg.cudagraph_mode
    if cfg.method:
        assert ns.speculative_config["method"] == cfg.method
        assert ns.speculative_config["num_speculative_tokens"] == cfg.draft_tokens
    else:
        assert ns.speculative_config is None
    if hybrid:
        assert ns.gdn_prefill_backend == "triton"
        assert ns.mamba_cache_mode == ("align" if cfg.prefix_caching else ns.mamba_cache_mode)
