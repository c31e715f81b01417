"""``--engine sglang`` without a server: the launch line in SGLang's spellings (every flag
read by SGLang's parser: its own where it imports, else sglang 0.5.12's argument list from
its source), the configuration read back from a ``/server_info`` of the real shape, the
cached-token count, the refusals, the rule line and ``--serve`` lines."""
from __future__ import annotations

import dataclasses

import pytest

from engine.presets import resolve
from harness.errors import CannotRun, UsageError
from harness.judge.bugb import predict
from harness.serve.client import ChatResult
from harness.serve.engines import make_adapter
from harness.serve.serve_line import _sglang_line
from harness.serve.sglang_adapter import (SGLANG_MODULE, SglangAdapter, effective_from_info,
                                         sglang_fields)
from harness.serve.slots import Slot
from tests.sglang.args import listed_or_real, real_parser_importable

GPU = Slot("gpu0", "0")


def cfg(**kw):
    base = dict(spec="ngram", ctx="huge", engine="sglang", model="owner/tiny", patches="none")
    return resolve(**{**base, **kw})


def parsed(argv):
    """``argv`` after ``python -m sglang.launch_server``, read by SGLang's parser."""
    assert argv[1:3] == ["-m", SGLANG_MODULE]
    parser, _ = listed_or_real()
    return parser.parse_args(argv[3:])


@pytest.mark.parametrize("spec,algo,draft,steps", [("ngram", "NGRAM", 4, None),
                                                   ("mtp", "NEXTN", 4, 3), ("none", None, None, None)])
def test_every_preset_parses_as_sglang_reads_it(spec, algo, draft, steps):
    argv, env = make_adapter("sglang").command(cfg(spec=spec), 30001, GPU)
    ns = parsed(argv)
    assert (ns.model_path, ns.port, ns.host, ns.page_size) == ("owner/tiny", 30001, "127.0.0.1", 128)
    assert (ns.speculative_algorithm, ns.speculative_num_draft_tokens) == (algo, draft)
    assert ns.speculative_num_steps == steps
    assert ns.enable_cache_report and ns.enable_metrics and ns.random_seed == 0
    assert ns.context_length == 245_760 and not ns.disable_radix_cache
    assert env == {"PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("mode,decode_off,piecewise_off", [
    ("FULL_AND_PIECEWISE", False, False), ("FULL_DECODE_ONLY", False, True),
    ("PIECEWISE", True, False), ("NONE", True, True)])
def test_graph_modes_are_sglangs_two_switches_and_read_back(mode, decode_off, piecewise_off):
    argv, _ = make_adapter("sglang").command(cfg(cudagraph_mode=mode), 1, GPU)
    ns = parsed(argv)
    assert (ns.disable_cuda_graph, ns.disable_piecewise_cuda_graph) == (decode_off, piecewise_off)
    assert sglang_fields(vars(ns))["cudagraph_mode"] == mode


def test_caching_off_budget_drafter_name_tp_and_engine_args():
    a = make_adapter("sglang", served_model_name="tiny",
                     extra_args=("--attention-backend", "triton",
                                 "--speculative-draft-model-path", "/d"))
    argv, _ = a.command(cfg(spec="dflash2", prefix_caching=False, max_num_batched_tokens=512),
                        1, Slot("g01", "0,1"))
    ns = parsed(argv)
    assert ns.disable_radix_cache and ns.chunked_prefill_size == 512
    assert (ns.speculative_algorithm, ns.speculative_num_draft_tokens) == ("DFLASH", 8)
    assert (ns.speculative_draft_model_path, ns.served_model_name) == ("/d", "tiny")
    assert ns.tensor_parallel_size == 2 and ns.attention_backend == "triton"


def test_a_hybrid_keeps_its_pages_and_drafts_beside_the_radix_cache():
    """SGLang's default mamba strategy (no_buffer) sets page_size 1 and refuses speculative
    decoding beside the radix cache (ServerArgs._handle_mamba_radix_cache): extra_buffer."""
    ns = parsed(make_adapter("sglang").command(cfg(geometry="hybrid"), 1, GPU)[0])
    assert ns.mamba_scheduler_strategy == "extra_buffer" and ns.page_size == 128
    off = parsed(make_adapter("sglang").command(cfg(geometry="hybrid", prefix_caching=False),
                                                1, GPU)[0])
    assert off.mamba_scheduler_strategy in (None, "auto")   # SGLang's default


@pytest.mark.parametrize("flags,needle", [
    (["--cudagraph", "FULL"], "SGLang has no such mode"),
    (["--patches", "all"], "give --patches none"),
    (["--block-size", "64", "--prefix-match-unit", "16"], "must equal --block-size 64")])
def test_what_sglang_cannot_run_is_one_line_before_any_server(flags, needle, tmp_path):
    """Issue 47: a row of ``settings/flag_checks.RULES`` asks the adapter, with the other
    rules, as the options are built; the configuration is not refused again elsewhere."""
    from harness.options import options_from_argv
    argv = ["--engine", "sglang", "--model", "owner/tiny", "--out", str(tmp_path), *flags]
    with pytest.raises(UsageError, match=needle) as e:
        options_from_argv(argv)
    assert str(e.value).count(needle) == 1
    assert SglangAdapter.config_refusal(cfg()) is None


def test_what_sglang_cannot_run_is_asked_once_per_configuration(monkeypatch, tmp_path):
    """One ask per configuration (the options' rule), none again at the session's check, and
    the adapter's check builds a refused configuration's command no more (the rule did)."""
    from harness.options import options_from_argv
    from harness.residue_sweep import Sweep
    from harness.settings.configs import expand_matrix
    asked = []
    real = SglangAdapter.config_refusal.__func__
    monkeypatch.setattr(SglangAdapter, "config_refusal",
                        classmethod(lambda c, x: asked.append(x) or real(c, x)))
    opts = options_from_argv(["--engine", "sglang", "--model", "owner/tiny", "--spec",
                              "ngram,none", "--out", str(tmp_path)])
    Sweep(opts, signals=False).check()
    assert len(asked) == len(opts.serving.configs) == 2
    (refused,) = expand_matrix(engine="sglang", model="owner/tiny", prefix_cache=None,
                               axes={"spec": ["ngram"], "ctx": ["huge"], "patches": ["all"]})
    assert "give --patches none" in SglangAdapter.config_refusal(refused)   # built, not refused
    make_adapter("sglang").check([refused], GPU)   # nor refused again at the session

SERVER_INFO = {   # sglang.srt.entrypoints.http_server.server_info's shape, abridged
    "model_path": "owner/tiny", "page_size": None, "disable_radix_cache": False,
    "speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 4,
    "disable_cuda_graph": False, "disable_piecewise_cuda_graph": False,
    "chunked_prefill_size": None, "context_length": None, "enable_cache_report": True,
    "status": "ready", "max_total_num_tokens": 65536, "max_req_input_len": 32767,
    "version": "0.5.12",
    "internal_states": [{"page_size": 1, "chunked_prefill_size": 8192, "context_length": 32768,
                         "disable_piecewise_cuda_graph": True, "speculative_algorithm": "NGRAM",
                         "speculative_num_draft_tokens": 4, "enable_cache_report": True,
                         "memory_usage": {"token_capacity": 65536}}]}


def test_the_effective_configuration_is_the_schedulers_view():
    eff = effective_from_info(cfg(), SERVER_INFO)
    assert (eff["block_size"], eff["prefix_match_unit"]) == (1, 1)   # None resolved to 1
    assert eff["cudagraph_mode"] == "FULL_DECODE_ONLY"   # the scheduler turned piecewise off
    assert (eff["method"], eff["draft_tokens"]) == ("ngram", 3)
    assert (eff["max_num_batched_tokens"], eff["max_model_len"]) == (8192, 32768)
    assert eff["sglang"]["max_total_num_tokens"] == 65536 and eff["patches"] == "none"
    assert eff["config_source"] == "the server's /server_info (internal_states[0])"
    assert effective_from_info(cfg(), {})["config_source"].startswith("the presets")


def test_a_missing_cache_report_is_zero_only_where_the_server_reports_its_cache():
    res = ChatResult("a", False, "stop", 100, None, 1, 0.1)
    a = make_adapter("sglang")
    on = effective_from_info(cfg(), SERVER_INFO)
    off = effective_from_info(cfg(), {**SERVER_INFO, "internal_states": [
        {**SERVER_INFO["internal_states"][0], "enable_cache_report": False}]})
    assert a.read_usage(res, on).cached_tokens == 0
    assert a.read_usage(res, off).cached_tokens is None
    assert a.read_usage(dataclasses.replace(res, cached_tokens=64), on).cached_tokens == 64


def test_the_rule_line_says_measured_only_and_cites_sglangs_dispatch():
    pred = predict(effective_from_info(cfg(), SERVER_INFO), 128)
    assert pred.measured_only and pred.residues is None and not pred.armed
    assert pred.why.startswith("no rule: measured only (")
    assert "ModelRunner.\\_forward\\_raw" in pred.why or "ModelRunner._forward_raw" in pred.why


def _line(text: str):
    from harness.serve.serve_line import _split, _without, REPLACED
    engine, tokens = _split(text)
    assert engine == "sglang"
    flags, dropped = _without(tokens, REPLACED)
    return _sglang_line(text, flags, tuple(dropped), parser_of=listed_or_real)


def test_a_serve_line_is_read_by_sglangs_parser():
    line = _line("python -m sglang.launch_server --model-path owner/tiny --page-size 64 "
                 "--speculative-algorithm NGRAM --speculative-num-draft-tokens 4 "
                 "--disable-cuda-graph --tp-size 2 --port 9000")
    assert (line.model, line.tensor_parallel_size, line.dropped) == ("owner/tiny", 2, ("--port 9000",))
    assert line.values == {"block_size": 64, "prefix_match_unit": 64, "method": "ngram",
                           "draft_tokens": 3, "cudagraph_mode": "PIECEWISE"}
    c = line.config("none")
    assert (c.engine, c.block_size, c.prefix_caching, c.patches) == ("sglang", 64, True, "none")
    argv = line.server_argv(9100)
    assert argv[1:5] == ["-m", SGLANG_MODULE, "--model-path", "owner/tiny"]
    assert "--model-path" not in argv[5:] and argv[-4:] == ["--host", "127.0.0.1", "--port", "9100"]


def test_a_serve_lines_servers_get_sglangs_additions_once():
    line = _line("sglang serve --model-path owner/tiny --page-size 64 --enable-metrics")
    a = make_adapter("sglang", extra_args=("--attention-backend", "triton"))
    a.serve = line
    argv, _ = a.command(line.config("none"), 9100, Slot("g01", "0,1"))
    ns = parsed(argv)
    assert ns.enable_cache_report and ns.enable_metrics and ns.tensor_parallel_size == 2
    assert argv.count("--enable-metrics") == 1 and ns.attention_backend == "triton"
    assert (ns.port, ns.page_size, ns.model_path) == (9100, 64, "owner/tiny")


@pytest.mark.parametrize("text,needle", [
    ("sglang serve --model-path /m --no-such-flag", "--no-such-flag"),
    ("sglang serve --model-path /m --speculative-algorithm EAGLE3", "EAGLE3"),
    ("sglang serve --page-size 64", "--model-path")])
def test_what_sglangs_parser_refuses_is_one_usage_line(text, needle):
    with pytest.raises(UsageError, match=needle):
        _line(text)


def test_without_sglang_a_serve_line_says_so_in_one_line():
    def absent(_cls):
        return None, "ModuleNotFoundError: No module named 'sglang'"
    with pytest.raises(CannotRun, match="SGLang's own argument parser cannot be built here"):
        _sglang_line("sglang serve --model-path /m", ["--model-path", "/m"], (), parser_of=absent)


@pytest.mark.skipif(not real_parser_importable(), reason="SGLang's server arguments do not "
                    "import here (tests/sglang/args.py)")
def test_the_listed_arguments_are_the_installed_sglangs():
    from tests.sglang.args import listed_parser
    from harness.serve.sglang_adapter import sglang_parser
    import argparse
    real, _ = sglang_parser(argparse.ArgumentParser)
    listed = listed_parser()._option_string_actions
    assert set(listed) == set(real._option_string_actions)

    def shape(a, choices=True):   # what a command line sees (choices: literal ones only)
        return a.dest, a.nargs, a.required, sorted(a.choices) if choices and a.choices else None
    assert {o: shape(a) for o, a in listed.items()} == \
        {o: shape(real._option_string_actions[o], bool(a.choices)) for o, a in listed.items()}


def test_sglangs_on_off_pairs_are_switches_in_the_listed_arguments():
    """argparse.BooleanOptionalAction (e.g. --lora-strict-loading): --x and --no-x, no value
    (the list once read them as flags taking a value; SGLang's real parser showed it)."""
    from tests.sglang.args import listed_parser
    ns = listed_parser().parse_args(["--model-path", "/m", "--no-record-nolora-graph",
                                     "--lora-strict-loading"])
    assert ns.record_nolora_graph is False and ns.lora_strict_loading is True
