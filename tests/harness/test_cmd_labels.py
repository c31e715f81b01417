"""Issue 27 item 4: an ``--engine cmd`` server is labelled by what it reports (the lab's
/version), by what the user declares (``--served-config``), or "as the command ran" with
the rule saying it cannot be checked: never by the harness's presets, which do not reach
a cmd server. Through the real entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, fake_cmd

LAB_MODEL = ROOT / "engine" / "lab" / "model"


def sweep(tmp_path: Path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "harness", "--engine", "cmd",
                           "--no-progress", "--out", str(tmp_path / "o"), *map(str, args)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)


def records(tmp_path: Path) -> list[dict]:
    (path,) = (tmp_path / "o").glob("*.jsonl")
    return [json.loads(ln) for ln in path.read_text().splitlines()]


def lab_as_cmd() -> str:
    # braces doubled: the template's own placeholders are {port}, {gpu}, {model}
    return (f"{sys.executable} -m engine.lab --port {{port}} --model {LAB_MODEL} "
            "-cc '{{\"cudagraph_mode\": \"FULL_AND_PIECEWISE\"}}' --patches none "
            "--speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": 3}}' "
            "--enable-prefix-caching --block-size 128 --prefix-match-unit 128 "
            "--enable-prompt-tokens-details")


# a real sweep in a subprocess with real servers: e2e (issue 50: the auto mark missed it)
@pytest.mark.e2e
def test_a_lab_server_run_as_cmd_is_labelled_by_what_it_reports(tmp_path):
    proc = sweep(tmp_path, "--model", LAB_MODEL, "--server-cmd", lab_as_cmd(),
                 "--residues", "3-5", "--slots", "2")
    assert proc.returncode == 1, proc.stderr[-2000:]
    recs = records(tmp_path)
    labels = {r["config_label"] for r in recs}
    assert len(labels) == 1
    (label,) = labels
    assert "FULL_AND_PIECEWISE" in label and "patches=none" in label and "PIECEWISE patches=all" not in label
    assert "from the server's /version" in label
    assert all(r["config"]["cudagraph_mode"] == "FULL_AND_PIECEWISE" for r in recs)
    assert {r["residue"] for r in recs if r["verdict"] != "ok"} == {4}
    assert "the sweep agrees: broken exactly at residue 4" in " ".join(proc.stdout.split())
    assert "another bug" not in proc.stdout + (tmp_path / "o").joinpath(
        recs[0]["run_id"] + ".md").read_text()


# a real sweep in a subprocess with real servers: e2e (issue 50: the auto mark missed it)
@pytest.mark.e2e
def test_a_server_that_reports_nothing_runs_as_the_command_ran(tmp_path, tok_dir):
    dry = sweep(tmp_path, "--model", tok_dir, "--server-cmd", fake_cmd(tok_dir),
                "--residues", "4", "--context", "800", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "rule predicts: cannot be checked before the server runs" in dry.stdout
    proc = sweep(tmp_path, "--model", tok_dir, "--server-cmd", fake_cmd(tok_dir),
                 "--residues", "4", "--context", "800", "--slots", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = records(tmp_path)
    assert all(r["config_label"].endswith("as the command ran") for r in recs)
    assert all("SPEC=" not in r["config_label"] and r["patches"] is None for r in recs)
    assert recs[0]["config"]["not_reported"] == ["method", "draft_tokens", "cudagraph_mode",
                                                  "prefix_caching", "block_size",
                                                  "prefix_match_unit", "patches"]
    assert "cannot name a residue: the server does not report its method" in " ".join(
        proc.stdout.split())   # prose wraps in 120 columns (issue 50)
    assert "agrees" not in proc.stdout


# a real sweep in a subprocess with real servers: e2e (issue 50: the auto mark missed it)
@pytest.mark.e2e
def test_served_config_declares_what_the_server_cannot_say(tmp_path, tok_dir):
    declared = json.dumps({"method": "mtp", "draft_tokens": 3, "cudagraph_mode":
                           "FULL_AND_PIECEWISE", "patches": "none", "block_size": 128,
                           "prefix_match_unit": 128})
    proc = sweep(tmp_path, "--model", tok_dir, "--server-cmd",
                 fake_cmd(tok_dir, "--break-residue", "4"), "--residues", "3-5",
                 "--context", "800", "--slots", "2", "--served-config", declared)
    assert proc.returncode == 1, proc.stderr[-2000:]
    recs = records(tmp_path)
    assert all("(from --served-config)" in r["config_label"] for r in recs)
    assert all(r["config"]["config_source"] == "--served-config" for r in recs)
    assert "the sweep agrees: broken exactly at residue 4" in " ".join(proc.stdout.split())
    bad = sweep(tmp_path, "--served-config", "{\"speed\": 1}", "--server-cmd",
                fake_cmd(tok_dir), "--model", tok_dir, "--dry-run")
    assert bad.returncode == 2 and "unknown field(s) speed" in bad.stderr
    lab = subprocess.run([sys.executable, "-m", "harness", "--served-config", "{}",
                          "--dry-run"], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert lab.returncode == 2 and "--served-config is for --engine cmd" in lab.stderr
