"""Issue 27 items 5 and 6 through the real entry point: what can be checked before a
server boots is checked then (the lab's own validation of the configuration, a --model
folder that does not exist, a residue set that names nothing), and flags that do not apply
or contradict each other are one line and exit 2, never silence. A sweep that would start
servers is given no --dry-run, so a check made only at boot would not pass these tests."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, one_line_exit_2


def run(*args, cwd: Path, timeout: float = 120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)



@pytest.mark.parametrize("args, needles", [
    # item 5: checks that came after boot
    (("--block-size", "7"), ("block=7", "the lab engine refuses this configuration",
                             "--prefix-match-unit must be a positive multiple of --block-size (7)")),
    (("--residues", ""), ("--residues: '' names no residue",)),
    (("--engine", "vllm", "--model", "/nonexistent/model", "--dry-run"),
     ("--model: /nonexistent/model does not exist",)),
    # item 6: flags that do not apply, or contradict
    (("--no-prefix-cache", "--prefix-cache"), ("contradict each other",)),
    (("--no-prefix-cache", "--phases", "cold,self-hit"),
     ("--no-prefix-cache: the self-hit phase cannot hit", "--phases cold")),
    (("--allow-fewer",), ("--allow-fewer is for --baseline",)),
    (("--engine-arg=--tensor-parallel-size=2",), ("the tensor-parallel size comes from the GPU groups",)),
    (("--prompts", "cases.jsonl", "--context", "800"), ("--context is not used with --prompts",)),
    (("--prompts", "cases.jsonl", "--answer-lines", "2"),
     ("--answer-lines is not used with --prompts",)),
], ids=["block-7", "empty-residues", "missing-model-dry-run", "prefix-cache-both",
        "self-hit-without-cache", "allow-fewer-alone", "tp-without-a-group", "prompts-context",
        "prompts-answer-lines"])
def test_one_line_exit_2_before_any_server(tmp_path, args, needles):
    (tmp_path / "cases.jsonl").write_text('{"id": "a", "messages": [{"role": "user", '
                                          '"content": "Say hi."}]}\n')
    proc = run("--residues", "0", "--no-progress", "--out", tmp_path / "o", *args, cwd=tmp_path)
    one_line_exit_2(proc, *needles)
    assert not list((tmp_path / "o").glob("*.logs")), "a server was started"


@pytest.mark.slow
def test_without_the_prefix_cache_a_cold_sweep_still_runs(tmp_path):
    proc = run("--residues", "4", "--no-progress", "--out", tmp_path / "o",
               "--no-prefix-cache", "--phases", "cold", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
