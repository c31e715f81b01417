"""A hostile server (tests/servers/misbehaving_engine.py, not the lab) through the real
CLI: every misbehaviour ends in its exact verdict, nothing raises out of the harness,
every record is written, no server is left behind."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("no_leftovers")
HOSTILE = ROOT / "tests" / "servers" / "misbehaving_engine.py"


def hostile_cmd(tok_dir: Path, *extra: str) -> str:
    return " ".join([sys.executable, str(HOSTILE), "--port", "{port}", "--model",
                     str(tok_dir), *extra])


def run(tmp_path: Path, tok_dir: Path, *args: str, server: tuple[str, ...] = (),
        out: str = "results") -> tuple[subprocess.CompletedProcess, list[dict]]:
    argv = [sys.executable, "-m", "harness", "--engine", "cmd", "--model", str(tok_dir),
            "--server-cmd", hostile_cmd(tok_dir, *server), "--context", "800",
            "--out", str(tmp_path / out), "--reports-dir", str(tmp_path / "reports"),
            "--no-progress", "--timeout", "4", *args]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    files = list((tmp_path / out).glob("*.jsonl"))
    assert len(files) == 1, (files, proc.stderr[-2000:])
    recs = [json.loads(x) for x in files[0].read_text().splitlines() if x.strip()]
    return proc, recs


def by_phase(recs: list[dict]) -> dict[str, dict]:
    return {r["phase"]: r for r in recs}


# misbehaviour -> (cold verdict, self-hit verdict, a phrase the self-hit reason contains)
CASES = {
    "none": ("ok", "ok", "matches"),
    "empty": ("broken", "broken", "empty answer"),
    "null": ("broken", "broken", "empty answer"),
    "one-char": ("broken", "broken", "1 char of the reference's"),
    "cut2": ("broken", "broken", "2 chars of the reference's"),
    "fragment13": ("broken", "broken", "13 chars of the reference's"),
    "repetition": ("broken", "broken", "degenerate repetition"),
    "one-word": ("diverged", "diverged", "differs from the reference at char"),
    "refusal": ("diverged", "diverged", "differs from the reference at char 0"),
    "trailing": ("diverged", "diverged", "reference then"),
    "wrong-prompt-tokens": ("invalid", "invalid", "usage.prompt_tokens"),
    "no-cached": ("ok", "invalid", "hit not proven: the server reports no cached tokens"),
    "lying-cached": ("invalid", "ok", "matches"),
    "length": ("invalid", "invalid", "cut by max_tokens"),
    "http500": ("crash", "crash", "in an earlier phase"),
    "http429": ("invalid", "invalid", "server rejected the request"),
    "malformed-json": ("invalid", "invalid", "not JSON"),
    "truncated-sse": ("invalid", "invalid", "not JSON"),
    "stall": ("timeout", "timeout", "in an earlier phase"),
    "die": ("crash", "crash", "in an earlier phase"),
    "dead-engine-health": ("crash", "crash", "in an earlier phase"),
    "kv-boot": ("boot-fail", "boot-fail", ""),
}


@pytest.mark.parametrize("how", sorted(CASES))
def test_each_misbehaviour_has_its_exact_verdict(tmp_path, tok_dir, how):
    cold, hit, phrase = CASES[how]
    # residue 5: a lie of n - 1 cached tokens leaves a tail of 1 where 5 was meant
    residue = "5" if how == "lying-cached" else "1"
    proc, recs = run(tmp_path, tok_dir, "--residues", residue, server=("--misbehave", how))
    cells = by_phase(recs)
    assert set(cells) == {"cold", "self-hit"}, recs
    assert (cells["cold"]["verdict"], cells["self-hit"]["verdict"]) == (cold, hit), \
        [(r["verdict"], r["reason"]) for r in recs]
    assert phrase in cells["self-hit"]["reason"]
    assert proc.returncode == (0 if how == "none" else 1), proc.stderr[-2000:]
    for r in recs:
        if r["verdict"] in ("broken", "diverged"):
            assert r["first_divergence"]["char"] is not None
    if how == "kv-boot":
        report = next((tmp_path / "reports").glob("*.md")).read_text()
        assert "KV cache is needed" in report
    if how == "lying-cached":
        sh = cells["self-hit"]
        assert (sh["computed_tail"], sh["intended_tail"]) == (1, 5) and sh["tail_note"]
