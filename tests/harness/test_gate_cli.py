"""``sweep --baseline`` end to end through the CLI against the fake engine: the gate
fails on lost coverage (issue 33 item 5) and names every cell it failed on, on stdout, in
the report's baseline section and in the JUnit (issue 36)."""
from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET

import pytest

from tests.harness.test_sweep_cmd import fake_sweep

pytestmark = pytest.mark.usefixtures("no_leftovers")


def test_a_run_that_never_booted_fails_the_gate_and_names_each_cell(tmp_path, tok_dir, cli):
    fake_sweep(cli, tok_dir, "--residues", "3,4", server=("--break-residue", "4"),
               check_rc=1, out="base")
    base = cli.results_file("base")
    junit = tmp_path / "j.xml"
    # residue 4's self-hit is known-broken in the baseline; now no server comes up
    proc = fake_sweep(cli, tok_dir, "--residues", "3,4", "--baseline", base, "--junit", junit,
                      server=("--boot-fail", shlex.quote("no GPU memory")), check_rc=1)
    assert "gate: 3 regression(s) against" in proc.stderr
    assert "1 cell(s) of lost coverage, no cell judged: failed" in proc.stderr
    out = proc.stdout
    assert "residue 3 cold: ok -> boot-fail" in out and "residue 4 cold: ok -> boot-fail" in out
    assert "residue 4 self-hit: broken in the baseline, boot-fail now" in out
    assert out.count("    rerun: sweep ") == 4 and "no cell of this run was judged" in out
    report = cli.report()
    section = report.split("## Baseline", 1)[1].split("\n## ", 1)[0]
    assert "Gate **failed**" in section and "broken → **boot-fail**" in section
    assert section.count("ok → **boot-fail**") == 3 and "--residues 4" in section
    assert cli.manifest()["baseline"]["passed"] is False
    cases = {(c.get("classname"), c.get("name").rsplit(" ", 2)[-2:][0],
              c.get("name").rsplit(" ", 1)[-1]): c.find("failure")
             for c in ET.parse(junit).getroot().iter("testcase")}
    lost = cases[("residue_sweep.coverage", "4", "self-hit")]
    assert lost.get("type") == "coverage" and "broken in the baseline, boot-fail now" in \
        lost.get("message")
    assert cases[("residue_sweep.regression", "3", "cold")].get("type") == "regression"


def test_a_passing_gate_says_so(tmp_path, tok_dir, cli):
    fake_sweep(cli, tok_dir, "--residues", "3,4", server=("--break-residue", "4"),
               check_rc=1, out="base")
    proc = fake_sweep(cli, tok_dir, "--residues", "3,4", "--baseline",
                      cli.results_file("base"), server=("--break-residue", "4"), check_rc=0)
    assert "gate: 0 regression(s) against" in proc.stderr and ": passed" in proc.stderr
    assert "Gate **passed**" in cli.report()
