"""Issue 27 item 7 through the real entry point: --gh-dry-run with no repository says the
request's OWNER/NAME is a placeholder; a prompts file with a UTF-8 BOM and a case id with
a non-ASCII letter are read (the docs say letters); a case far over max_model_len is
refused after one count of it, not after the calibration's dozens. (The resume line of the
interrupt message keeping the report in reports/ is in test_resume_file.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "reports" / "fixtures" / "lab" / "fvp.jsonl.gz"


def run(*args, cwd: Path, env: dict | None = None, timeout: float = 300):
    full = dict(env if env is not None else os.environ)
    full["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=full)


def test_gh_dry_run_without_a_repository_says_owner_name_is_a_placeholder(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GITHUB_TOKEN", "GH_TOKEN", "GITHUB_REPOSITORY", "GITHUB_STEP_SUMMARY")}
    env["PATH"] = os.path.dirname(sys.executable)   # no gh
    proc = run("report", FIXTURE, "-o", tmp_path / "r.md", "--gh-issue", "5", "--gh-dry-run",
               cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "repos/OWNER/NAME" in proc.stdout
    assert "no repository is known" in proc.stderr and "--gh-repo OWNER/NAME" in proc.stderr


def _case(cid: str, content: str) -> str:
    return json.dumps({"id": cid, "messages": [{"role": "user", "content": content}]},
                      ensure_ascii=False)


def test_a_bom_and_a_non_ascii_id_are_read(tmp_path):
    text = "Copy the next line.\n" + "The quick brown fox jumps over the lazy dog.\n" * 40
    path = tmp_path / "cases.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (_case("unicode-\u00fc", text) + "\n").encode())
    proc = run("--prompts", path, "--reference", "cold", "--residues", "0", "--dry-run",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "case unicode-\u00fc" in proc.stdout


def test_a_case_far_too_long_is_refused_after_one_count(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text(_case("big", "The quick brown fox jumps over the lazy dog. " * 45000) + "\n")
    t0 = time.monotonic()
    proc = run("--prompts", path, "--reference", "cold", "--residues", "0", "--dry-run",
               cwd=tmp_path)
    took = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "exceeds max_model_len 245760" in lines[0], lines
    assert took < 60, took   # before: 86 s (the issue) to 256 s (a loaded 2-vCPU box)


def test_calibration_counts_a_too_long_case_once(tmp_path):
    from harness.prompts import CaseTooLong, calibrate_case, load_cases
    path = tmp_path / "c.jsonl"
    path.write_text(_case("c", "word " * 50) + "\n")
    (case,) = load_cases(str(path))
    calls = []

    def count_many(convs):
        calls.append(len(convs))
        return [10_000 + i for i in range(len(convs))]
    try:
        calibrate_case(case, count_many, 128, limit=5_000)
    except CaseTooLong as e:
        assert e.tokens == 10_000
    else:
        raise AssertionError("not refused")
    assert calls == [1]
