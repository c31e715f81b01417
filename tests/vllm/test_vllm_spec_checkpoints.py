"""The speculative presets on the committed checkpoints, against vLLM 0.27.1 itself: the
argv its parser accepts, the MTP draft config it derives from the hybrid's config.json, and
the one-line refusals for a checkpoint without an MTP head or a dflash2 run without a
drafter."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests._vllm import require_vllm

from engine.presets import resolve
from engine.vllm.launch import LaunchError, build_launch

ROOT = Path(__file__).resolve().parents[2]
HYBRID = ROOT / "engine" / "tinymodel" / "weights" / "hybrid"
DRAFTER = ROOT / "engine" / "tinymodel" / "weights" / "dflash"


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


def _launch(spec: str, k: int, mode: str, **kw):
    cfg = resolve(spec, "huge", engine="vllm", geometry="hybrid", draft_tokens=k,
                  cudagraph_mode=mode)
    return build_launch(cfg, port=8123, model=str(HYBRID), **kw)


@pytest.mark.parametrize("k", [3, 1])
@pytest.mark.parametrize("mode", ["FULL_AND_PIECEWISE", "PIECEWISE"])
def test_mtp_argv_on_the_committed_hybrid_parses(vllm_parser, k, mode):
    ns = vllm_parser.parse_args(_launch("mtp", k, mode).argv[3:])
    assert ns.speculative_config == {"method": "mtp", "num_speculative_tokens": k}
    assert ns.mamba_cache_mode == "align"  # Qwen3_5MTP refuses 'all'
    assert ns.language_model_only is True and ns.model == str(HYBRID)


def test_dflash2_argv_parses_with_the_drafter(vllm_parser, tmp_path):
    draft = DRAFTER if DRAFTER.is_dir() else tmp_path / "dflash"
    ns = vllm_parser.parse_args(_launch("dflash2", 7, "PIECEWISE", draft_model=str(draft)).argv[3:])
    assert ns.speculative_config == {"method": "dflash", "num_speculative_tokens": 7,
                                     "model": str(draft)}


def test_vllm_derives_a_one_layer_qwen3_5_mtp_draft_from_the_config():
    """vLLM's own draft-config path for method mtp: model_type qwen3_5 becomes
    Qwen3_5MTP, and its layer count comes from text_config.mtp_num_hidden_layers."""
    require_vllm()
    from vllm.config.speculative import SpeculativeConfig
    from vllm.transformers_utils.config import get_config
    from vllm.transformers_utils.model_arch_config_convertor import MODEL_ARCH_CONFIG_CONVERTORS
    cfg = SpeculativeConfig.hf_config_override(get_config(str(HYBRID), trust_remote_code=False))
    assert cfg.architectures == ["Qwen3_5MTP"] and cfg.model_type == "qwen3_5_mtp"
    conv = MODEL_ARCH_CONFIG_CONVERTORS[cfg.model_type](cfg, cfg.get_text_config())
    assert conv.get_num_hidden_layers() == 1


def _headless_copy(tmp_path: Path) -> Path:
    d = tmp_path / "hybrid-no-head"
    d.mkdir()
    for f in HYBRID.iterdir():
        if f.name != "mtp.safetensors":
            shutil.copy(f, d / f.name)
    cfg = json.loads((d / "config.json").read_text())
    cfg["text_config"].pop("mtp_num_hidden_layers", None)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_mtp_on_a_checkpoint_without_a_head_is_refused(tmp_path):
    d = _headless_copy(tmp_path)
    cfg = resolve("mtp", "huge", engine="vllm", geometry="hybrid")
    with pytest.raises(LaunchError, match="no MTP head .*mtp-train"):
        build_launch(cfg, port=1, model=str(d))


@pytest.mark.parametrize("spec,needle", [("mtp", "has no MTP head"),
                                         ("dflash2", "pass --draft-model DIR")])
def test_sweep_says_so_in_one_line_and_exits_2(tmp_path, spec, needle, cli):
    model = _headless_copy(tmp_path) if spec == "mtp" else HYBRID
    out = cli("--engine", "vllm", "--model", model, "--geometry", "hybrid", "--spec", spec,
              "--residues", "4", "--dry-run", "--out", tmp_path / "r", timeout=120)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr
