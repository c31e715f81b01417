"""``sweep --serve LINE``: a server line swept as written, read by vLLM's own parser where
vLLM is installed (the lab's where it is not), and vLLM's spellings of the sweep's flags."""
from __future__ import annotations

import json
import shlex

import pytest

from harness.serve import serve_line
from harness.settings.configs import config_id
from harness.errors import UsageError
from harness.options import options_from_argv
from harness.serve.serve_line import parse_serve_line, vllm_spellings
from tests._vllm import require_vllm
from tests.conftest import one_line_exit_2

SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
CC = json.dumps({"cudagraph_mode": "FULL_AND_PIECEWISE"})
VLLM_LINE = shlex.join(["vllm", "serve", "/models/q", "--speculative-config", SPEC, "-cc", CC,
                        "--enable-prefix-caching", "--block-size", "128",
                        "--prefix-match-unit", "128", "--max-model-len", "8192",
                        "--kv-cache-memory-bytes", "5G", "--gpu-memory-utilization", "0.5",
                        "-tp", "2", "--port", "8001", "--mamba-cache-mode", "align"])


@pytest.fixture
def fresh_cache():
    serve_line.parse_serve_line.cache_clear()
    serve_line._vllm_parser.cache_clear()
    yield
    serve_line.parse_serve_line.cache_clear()
    serve_line._vllm_parser.cache_clear()


@pytest.fixture(scope="module")
def vllm_parser():
    """vLLM's own ``vllm serve`` parser, built as tests/vllm/test_vllm_launch.py does."""
    require_vllm()
    import vllm.platforms as platforms
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    saved = platforms._current_platform
    platforms._current_platform = CpuPlatform()
    try:
        yield make_arg_parser(FlexibleArgumentParser())
    finally:
        platforms._current_platform = saved


def test_a_vllm_line_is_read_by_vllms_own_parser(vllm_parser, fresh_cache):
    line = parse_serve_line(VLLM_LINE)
    assert line.parser.startswith("vLLM 0.27.1's own parser"), line.parser
    ns = vllm_parser.parse_args(shlex.split(VLLM_LINE)[2:])   # what `vllm serve` itself reads
    assert line.model == ns.model_tag == "/models/q"
    assert line.values["method"] == ns.speculative_config["method"] == "ngram"
    assert line.values["draft_tokens"] == ns.speculative_config["num_speculative_tokens"] == 3
    assert line.values["kv_cache_memory_bytes"] == ns.kv_cache_memory_bytes   # "5G", as vLLM reads it
    assert line.values["max_model_len"] == ns.max_model_len == 8192
    assert (line.values["block_size"], line.values["prefix_match_unit"]) == (128, 128)
    assert line.values["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert line.values["prefix_caching"] is ns.enable_prefix_caching is True
    assert line.tensor_parallel_size == ns.tensor_parallel_size == 2
    assert line.dropped == ("--port 8001",)
    # every flag is kept as written (the model and the port aside), in the line's order
    assert "--gpu-memory-utilization" in line.flags and "--port" not in line.flags
    argv = line.server_argv(9000)
    assert argv[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "/models/q"]
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "9000"]
    # the server argv parses back to the same values with vLLM's parser
    again = vllm_parser.parse_args(argv[3:])
    assert again.speculative_config == ns.speculative_config and again.port == 9000


def test_a_flag_vllm_refuses_is_one_usage_error(vllm_parser, fresh_cache):
    with pytest.raises(UsageError, match="--serve: unrecognized arguments: --no-such-flag"):
        parse_serve_line("vllm serve /m --no-such-flag")
    with pytest.raises(UsageError, match="speculative method 'eagle3'"):
        parse_serve_line(shlex.join(["vllm", "serve", "/m", "--speculative-config",
                                     '{"method": "eagle3", "num_speculative_tokens": 3}']))


def test_without_vllm_the_labs_parser_reads_what_it_knows(fresh_cache, monkeypatch):
    monkeypatch.setattr(serve_line, "_vllm_parser", lambda: (None, "ImportError: no vllm"))
    # the lab reads vLLM's human-readable sizes as vLLM does (5G = 5 GiB); not-a-size is refused
    with pytest.raises(UsageError, match="--kv-cache-memory-bytes: not an integer.*read by the lab's parser"):
        parse_serve_line(VLLM_LINE.replace("5G", "5GB"))
    assert parse_serve_line(VLLM_LINE).values["kv_cache_memory_bytes"] == 5 * 2**30
    line = parse_serve_line(VLLM_LINE.replace("5G", "5368709120"))
    assert line.parser.startswith("the lab's parser (vLLM's cannot be built here: ImportError")
    assert (line.values["method"], line.values["draft_tokens"], line.values["block_size"]) == \
        ("ngram", 3, 128)
    assert line.tensor_parallel_size == 2
    assert "--gpu-memory-utilization" in line.flags   # unknown to the lab: kept, unread


def test_the_sweep_takes_the_lines_configuration(tmp_path, fresh_cache, monkeypatch):
    # vLLM's parser where installed, the lab's where not; the restore check below asks the
    # installed vLLM whether it serves sleep mode: answered yes, as the pinned release does
    monkeypatch.setattr("harness.serve.vllm_adapter.vllm_serves_sleep", lambda: True)
    # and whether it fixes kernel choices: no, so a restore point sleeps (with the switch
    # it is restored by the fill: tests/harness/test_poison.py)
    monkeypatch.setattr("engine.vllm.determinism.vllm_fixes_kernels", lambda: False)
    model = tmp_path / "m"
    model.mkdir()
    line = VLLM_LINE.replace("/models/q", str(model))
    opts = options_from_argv(["--serve", line, "--residues", "3,4"])
    (cfg,) = opts.serving.configs
    assert (opts.serving.engine, cfg.model, cfg.spec, cfg.draft_tokens, cfg.cudagraph_mode,
            cfg.block_size, cfg.prefix_match_unit, cfg.max_model_len, cfg.patches) == \
        ("vllm", str(model), "ngram", 3, "FULL_AND_PIECEWISE", 128, 128, 8192, "none")
    assert [s.id for s in opts.running.slots] == ["gpu0+1"]     # -tp 2: one group of two
    from harness.residue_sweep import adapter_for
    adapter = adapter_for(opts)
    argv, env = adapter.command(cfg, 9000, opts.running.slots[0])
    assert argv.count("-tp") == 1 and "--tensor-parallel-size" not in argv
    assert "--enable-prompt-tokens-details" in argv and env["RESIDUE_LAB_PATCHES"] == "none"
    assert "--enable-sleep-mode" in adapter.for_isolation("restore").command(
        cfg, 9000, opts.running.slots[0])[0]
    # the rerun line parses back to the same configuration
    from harness.settings.flags import rerun_command
    again = options_from_argv(shlex.split(rerun_command(opts, cfg, 4, 128))[1:])
    assert [config_id(c) for c in again.serving.configs] == [config_id(cfg)]
    assert [s.id for s in again.running.slots] == ["gpu0+1"]
    with pytest.raises(UsageError, match="--cudagraph PIECEWISE contradicts the line"):
        options_from_argv(["--serve", line, "--cudagraph", "PIECEWISE"])
    with pytest.raises(UsageError, match="groups of 2"):
        options_from_argv(["--serve", line, "--gpus", "0,1"])


def test_vllms_spellings_of_the_sweeps_flags():
    argv = vllm_spellings(["-cc", '{"cudagraph_mode": "full"}', "--speculative-config",
                           '{"method": "ngram", "num_speculative_tokens": 2}',
                           "--enable-prefix-caching", "--base-url=http://h:8000",
                           "--engine-arg", "-cc", "--serve", "--enable-prefix-caching"])
    assert argv == ["--cudagraph", "FULL", "--spec", "ngram", "--draft-tokens", "2",
                    "--prefix-cache", "--url", "http://h:8000",
                    "--engine-arg", "-cc", "--serve", "--enable-prefix-caching"]
    ours = options_from_argv(["--cudagraph", "FULL", "--spec", "dflash2", "--prefix-cache"])
    theirs = options_from_argv(["--compilation-config", '{"cudagraph_mode": "FULL"}',
                                "--speculative-config", '{"method": "dflash"}',
                                "--enable-prefix-caching"])
    assert [config_id(c) for c in theirs.serving.configs] == [config_id(c) for c in ours.serving.configs]
    with pytest.raises(UsageError, match="-cc: not JSON"):
        vllm_spellings(["-cc", "FULL"])


def test_a_line_this_harness_cannot_start_is_one_line_exit_2(cli):
    one_line_exit_2(cli("--serve", "nginx -g x"), "--serve: 'nginx -g x' is not a server line",
                    "vllm serve MODEL")
    one_line_exit_2(cli("--serve", "python -m engine.lab --block-size 16", "--spec", "ngram"),
                    "--spec ngram contradicts the line")


@pytest.mark.parametrize("isolation, poison, added", [
    ("fresh", "auto", ""), ("restore", "off", " --enable-sleep-mode"),
    ("restore", "auto", "")])   # --poison on the lab: restore is the fill, no sleep mode
def test_a_lab_line_swept_end_to_end(cli, isolation, poison, added):
    line = shlex.join(["python", "-m", "engine.lab", "--model", str(cli.lab_model()),
                       "--enable-prefix-caching", "--block-size", "128",
                       "--prefix-match-unit", "128", "--speculative-config",
                       '{"method": "mtp", "num_speculative_tokens": 3}', "-cc",
                       '{"cudagraph_mode": "FULL_AND_PIECEWISE"}', "--patches", "none",
                       "--port", "9"])
    proc = cli.sweep("--serve", line, "--residues", "3,4", "--isolation", isolation,
                     "--poison", poison, rc=1)
    assert "serve: lab line read by the lab's parser: SPEC=mtp" in proc.stderr
    assert (f"serve: added for {isolation} points: --host 127.0.0.1 --port {{port}} (a port "
            f"per server; the line's --port 9 is not used), --enable-prompt-tokens-details"
            f"{added}") in proc.stderr
    recs = cli.records()
    verdicts = {(r["residue"], r["phase"]): r["verdict"] for r in recs}
    assert verdicts == {(3, "cold"): "ok", (3, "self-hit"): "ok", (4, "cold"): "ok",
                        (4, "self-hit"): "broken"}    # the lab's Bug B at k + 1, unpatched
    if isolation == "fresh":   # explain's ladder changes flags the line holds: refused
        one_line_exit_2(cli("explain", cli.results_file()), "the run swept a --serve line")
    for r in recs:   # the effective configuration: what the server ran
        assert (r["config"]["block_size"], r["config"]["method"], r["config"]["patches"]) == \
            (128, "mtp", "none")
        assert r["rerun"].startswith("sweep --engine lab") and "--serve" in r["rerun"]
