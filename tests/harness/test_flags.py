"""Each sweep flag is declared once (harness/settings/flags.py): the parser, the matrix and the
rerun command all come from that declaration, and the one Bug B rule (harness/judge/bugb.py)
is what the dry run prints."""
from __future__ import annotations

import shlex

import pytest

from harness.judge import bugb
from harness.command.cli import build_options
from harness.settings.configs import config_id, modulus_for
from harness.settings.flags import FLAGS, rerun_command, sweep_parser

README_MATRIX = ["--spec", "mtp", "--ctx", "huge", "--residues", "all", "--cudagraph",
                 "FULL_AND_PIECEWISE,PIECEWISE", "--patches", "none,all"]


def options(argv):
    return build_options(sweep_parser().parse_args(argv), argv)


def test_every_flag_is_declared_once_and_parsed():
    names = [f.name for f in FLAGS]
    assert len(names) == len(set(names))
    usage = sweep_parser().format_usage()
    assert all(f"[{n}" in usage for n in names)


def test_a_rerun_command_reparses_to_its_own_point():
    opts = options(README_MATRIX + ["--block-size", "64,128", "--prefix-match-unit", "none,128"])
    assert len(opts.serving.configs) == 16
    for cfg in opts.serving.configs:
        line = rerun_command(opts, cfg, 4, modulus_for(cfg, opts.measure.modulus))
        argv = shlex.split(line)[1:]
        again = options(argv)
        assert [config_id(c) for c in again.serving.configs] == [config_id(cfg)], line
        assert again.measure.residues == "4" and again.running.slots[0].id == "cpu0" and len(again.running.slots) == 1
        assert again.measure.phases == opts.measure.phases and again.measure.context == opts.measure.context


def test_the_rule_predicts_residue_4_for_the_full_unpatched_configuration_only():
    opts = options(README_MATRIX)
    predicted = {(c.cudagraph_mode, c.patches): bugb.predict(c.as_dict(), 128).residues
                 for c in opts.serving.configs}
    assert predicted == {("FULL_AND_PIECEWISE", "none"): [4], ("FULL_AND_PIECEWISE", "all"): [],
                         ("PIECEWISE", "none"): [], ("PIECEWISE", "all"): []}


def test_the_dry_run_prints_that_rule(cli):
    out = cli(*README_MATRIX, "--dry-run", timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rules = [ln.strip() for ln in out.stdout.splitlines() if ln.strip().startswith("rule predicts")]
    assert len(rules) == 4
    assert rules[0].startswith("rule predicts: [4]")
    assert all(r.startswith("rule predicts: nothing") for r in rules[1:])


def _help(capsys) -> str:
    """``sweep --help`` through the CLI's main, its whitespace collapsed."""
    from harness.command.cli import main
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_no_written_help_text_names_an_engine_but_the_cmd_flags():
    """A help text that says something of lab or vLLM is built from the adapters (the
    test below); only --engine cmd's own flags say so in words."""
    import re
    written = {f.name for f in FLAGS if isinstance(f.help, str)
               and re.search(r"\b(lab|vllm|vLLM|cmd)\b", f.help)}
    assert written == {"--server-cmd", "--served-config"}


def test_the_help_says_each_engines_facts_from_its_adapter(capsys, monkeypatch):
    """--help's engine facts are the adapters' (the ones the sweep runs on): change a fact
    in an adapter and the help, and what the sweep does, follow."""
    from harness.serve.engines import CmdAdapter, LabAdapter, VllmAdapter
    from harness.errors import UsageError
    before = _help(capsys)   # an engine added to ADAPTERS comes after these (no edit here)
    assert "(default: lab 60, vllm 900, cmd 300" in before
    assert "(default: lab 5, vllm 5, cmd 0" in before
    assert "--launcher" in before and "prefork (--engine lab or vllm:" in before
    assert "--cache-dir DIR --engine vllm:" in before and "--draft-model DIR --engine vllm:" in before
    monkeypatch.setattr(LabAdapter, "boot_timeout_s", 42.0)
    monkeypatch.setattr(VllmAdapter, "logprobs_default", 7)
    monkeypatch.setattr(LabAdapter, "prefork", classmethod(lambda cls: None))
    monkeypatch.setattr(CmdAdapter, "compile_caches", True)
    monkeypatch.setattr(CmdAdapter, "takes_draft_model", True)
    monkeypatch.setattr(LabAdapter, "runners", ("v9",))
    monkeypatch.setattr(VllmAdapter, "help_notes", {**VllmAdapter.help_notes,
                                                    "--geometry": "hybrid means X"})
    after = _help(capsys)
    assert "(default: lab 42, vllm 900, cmd 300" in after
    assert "(default: lab 5, vllm 7, cmd 0" in after
    assert "prefork (--engine vllm:" in after
    assert "--cache-dir DIR --engine vllm or cmd:" in after
    assert "--draft-model DIR --engine vllm or cmd:" in after
    assert "lab: v9, vllm: v1 | v2;" in after
    assert "vllm: hybrid means X" in after and "triton GDN" not in after
    # the same facts are what the sweep runs on
    assert options(["--engine", "lab"]).running.boot_timeout == 42.0
    assert options(["--engine", "vllm", "--model", "m"]).measure.logprobs == 7
    with pytest.raises(UsageError, match="--launcher prefork: --engine lab cannot be forked"):
        options(["--launcher", "prefork"])
