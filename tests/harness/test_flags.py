"""Each sweep flag is declared once (harness/flags.py): the parser, the matrix and the
rerun command all come from that declaration, and the one Bug B rule (harness/bugb.py)
is what the dry run prints."""
from __future__ import annotations

import shlex

from harness import bugb
from harness.cli import build_options
from harness.configs import config_id, modulus_for
from harness.flags import FLAGS, rerun_command, sweep_parser

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
    assert len(opts.configs) == 16
    for cfg in opts.configs:
        line = rerun_command(opts, cfg, 4, modulus_for(cfg, opts.modulus))
        argv = shlex.split(line)[1:]
        again = options(argv)
        assert [config_id(c) for c in again.configs] == [config_id(cfg)], line
        assert again.residues == "4" and again.slots[0].id == "cpu0" and len(again.slots) == 1
        assert again.phases == opts.phases and again.context == opts.context


def test_the_rule_predicts_residue_4_for_the_full_unpatched_configuration_only():
    opts = options(README_MATRIX)
    predicted = {(c.cudagraph_mode, c.patches): bugb.predict(c.as_dict(), 128).residues
                 for c in opts.configs}
    assert predicted == {("FULL_AND_PIECEWISE", "none"): [4], ("FULL_AND_PIECEWISE", "all"): [],
                         ("PIECEWISE", "none"): [], ("PIECEWISE", "all"): []}


def test_the_dry_run_prints_that_rule(cli):
    out = cli(*README_MATRIX, "--dry-run", timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rules = [ln.strip() for ln in out.stdout.splitlines() if ln.strip().startswith("rule predicts")]
    assert len(rules) == 4
    assert rules[0].startswith("rule predicts: [4]")
    assert all(r.startswith("rule predicts: nothing") for r in rules[1:])
