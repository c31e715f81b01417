"""Issue 50 item 1: mistakes caught before any server starts. Each ran a whole sweep on
main (exit 1, or a silent fallback); each is now one line, exit 2, before any server (a
``RULES`` row, a flag's converter, or the plan's ``PlanError``), or a warning said once."""
from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.options import options_from_argv
from tests.conftest import one_line_exit_2
from tests.reports import synth


def _refused(argv, tmp_path) -> str:
    with pytest.raises(UsageError) as e:
        options_from_argv([*argv, "--out", str(tmp_path / "o")])
    return str(e.value)


@pytest.mark.parametrize("argv, needle", [
    (["--max-tokens", "1"], "--max-tokens 1 cannot hold the reference"),
    (["--answer-lines", "1000"], "--answer-lines 1000 lines are at least 1000 tokens"),
    (["--timeout", "0.001"], "--timeout: 0.001 s is too short"),
    (["--boot-timeout", "0.01"], "--boot-timeout: 0.01 s is too short"),
    (["--out", ""], "--out: an empty path"),
    (["--reports-dir", " "], "--reports-dir: an empty path"),
])
def test_a_value_that_cannot_work_is_refused_by_the_options(argv, needle, tmp_path):
    with pytest.raises(UsageError, match=needle.replace("(", r"\(")):
        options_from_argv(argv)


def test_a_case_named_twice_is_refused(tmp_path):
    prompts = tmp_path / "cases.jsonl"
    prompts.write_text('{"id": "a", "messages": [{"role": "user", "content": "Say hi."}]}\n')
    said = _refused(["--prompts", str(prompts), "--case", "a,a", "--reference", "cold"],
                    tmp_path)
    assert said == "--case: 'a' is named twice; name each case once"


def test_a_baseline_of_other_configurations_is_refused_before_the_sweep(tmp_path):
    other = synth.make_config(spec="none", ctx="fast")
    base = synth.write_jsonl(tmp_path / "base.jsonl", synth.sweep(other, range(3)))
    said = _refused(["--baseline", str(base)], tmp_path)
    assert said.startswith(f"--baseline {base}: none of its 1 configuration(s) (SPEC=none")
    # a baseline of the same configuration but another patch set pairs (compare does)
    mine = synth.make_config(cudagraph="PIECEWISE", patches="none")
    same = synth.write_jsonl(tmp_path / "same.jsonl", synth.sweep(mine, range(3)))
    options_from_argv(["--baseline", str(same), "--cudagraph", "PIECEWISE", "--out",
                       str(tmp_path / "o")])


def test_two_servers_on_one_gpu_are_said_once(tmp_path):
    opts = options_from_argv(["--gpus", "0,0", "--out", str(tmp_path / "o")])
    assert [s.id for s in opts.running.slots] == ["gpu0", "gpu0.1"]
    assert opts.flag_notes == ("--gpus 0,0: GPU 0 runs two servers side by side on one GPU "
                               "(each gets part of its memory); give each GPU once for one "
                               "server per GPU",)
    assert options_from_argv(["--gpus", "0,1"]).flag_notes == ()


def test_a_budget_short_of_the_reference_stops_at_the_plan(cli):
    """--max-tokens 10 holds more than 3 lines' worth of newlines but not the 3 lines:
    the plan counts the reference with the configuration's tokenizer."""
    proc = cli.sweep("--residues", "3", "--max-tokens", "10")
    one_line_exit_2(proc, "--max-tokens 10 cannot hold the reference of", "tokens")
    assert not list((cli.tmp / "results").glob("*.jsonl"))


def test_a_kv_budget_of_no_block_is_refused_by_the_lab_before_boot(cli):
    proc = cli.sweep("--residues", "3", "--kv-cache-memory-bytes", "100")
    one_line_exit_2(proc, "the lab engine refuses this configuration",
                    "--kv-cache-memory-bytes 100 holds no KV cache block")


def test_a_golden_run_sharing_no_prompt_is_refused(cli):
    first = cli.sweep("--residues", "3", "--phases", "cold")
    assert first.returncode == 0, first.stderr[-2000:]
    run = cli.results_file().name.removesuffix(".jsonl")
    proc = cli.sweep("--residues", "3", "--phases", "cold", "--context", "2000",
                     "--reference", f"golden:{run}")
    one_line_exit_2(proc, f"golden:{run}: that run shares no prompt with this one")


@pytest.mark.parametrize("cell", [["--residue", "999"], ["--config", "nothing-like-this"]])
def test_compare_of_a_cell_no_run_has_is_a_usage_error(cell, cli, tmp_path):
    recs = synth.write_jsonl(tmp_path / "r.jsonl", synth.sweep(synth.make_config(), range(3)))
    one_line_exit_2(cli("compare", recs, *cell), "no record of 1 run(s) is the cell")
