"""argv -> ``SweepOptions`` reads each command line once (issue 34: a ``--resume`` parsed
argv up to four times, ``--url`` and ``--serve`` read it again for the flags it wrote).

The spy counts every parse the sweep's own parser makes (``prog == "sweep"``); the one
parse of no arguments that gives every flag's default is cached per process and not an
argv of anyone's, so it is left out."""
from __future__ import annotations

import argparse
import json
from collections import Counter

import pytest

from harness.options import parse_sweep_argv
from harness.records.store import MANIFEST_SUFFIX
from harness.settings.flag_manifest import flags_json, parse_flags


@pytest.fixture
def parses(monkeypatch) -> Counter:
    seen: Counter = Counter()
    real = argparse.ArgumentParser.parse_known_args

    def spy(self, args=None, namespace=None):
        if self.prog == "sweep" and args:
            seen[tuple(args)] += 1
        return real(self, args, namespace)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", spy)
    return seen


@pytest.mark.parametrize("argv", [
    ["--residues", "3-5", "--slots", "2"],
    ["--url", "http://127.0.0.1:9", "--residues", "3-5"],   # no request either
    ["--spec", "mtp,ngram", "--draft-tokens", "2,3", "--no-prefix-cache", "--phases", "cold"],
])
def test_a_sweep_command_line_is_parsed_once(argv, parses, tmp_path):
    parse_sweep_argv([*argv, "--out", str(tmp_path)])
    assert dict(parses) == {(*argv, "--out", str(tmp_path)): 1}


def test_a_resume_parses_its_line_and_the_runs_command_line_once_each(parses, tmp_path):
    run_id = "20260101-000000-abcd"
    command = ["--residues", "3-5", "--spec", "ngram", "--out", str(tmp_path)]
    ns, _ = parse_flags(command)
    parses.clear()
    (tmp_path / f"{run_id}{MANIFEST_SUFFIX}").write_text(json.dumps(
        {"run_id": run_id, "command": " ".join(["sweep", *command]),
         "options": flags_json(ns)}))
    resume = ["--resume", run_id, "--out", str(tmp_path), "--slots", "3"]
    opts = parse_sweep_argv(resume)
    assert dict(parses) == {tuple(resume): 1, tuple(command): 1}
    assert opts.running.resume == run_id and len(opts.running.slots) == 3 and opts.serving.configs[0].spec == "ngram"
