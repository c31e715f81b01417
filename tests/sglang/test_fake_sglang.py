"""``sweep --engine sglang`` end to end against a fake SGLang on 127.0.0.1: the real entry
point, the adapter's own launch line (``python -m sglang.launch_server``, resolved to
``tests/servers/fake_sglang/sglang/launch_server.py`` by PYTHONPATH), servers started and
stopped by the harness. The fake has SGLang 0.5.12's endpoint shapes: /health 503 while
starting, /server_info, /flush_cache (no /reset_prefix_cache), /tokenize, cached tokens in
the usage only when some were cached."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, one_line_exit_2, read_jsonl
from tests.sglang.args import sglang_installed

pytestmark = pytest.mark.e2e
FAKE = ROOT / "tests" / "servers" / "fake_sglang"
TOKENIZER = ROOT / "tests" / "fixtures" / "tokenizer"


def sweep(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI with the fake ``sglang`` package first on PYTHONPATH (its servers inherit it)."""
    full = {**os.environ, **(env or {}), "PYTHONPATH": f"{FAKE}{os.pathsep}{ROOT}"}
    return subprocess.run([sys.executable, "-m", "harness", "--engine", "sglang", "--model",
                           str(TOKENIZER), "--spec", "ngram", "--no-progress",
                           "--out", str(tmp_path / "out"), "--reports-dir",
                           str(tmp_path / "reports"), *args], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=240)


def records(tmp_path: Path) -> list[dict]:
    (path,) = (tmp_path / "out").glob("*.jsonl")
    return read_jsonl(path)


def report(tmp_path: Path) -> str:
    (path,) = (tmp_path / "reports").glob("*.md")
    return path.read_text()


def test_fresh_servers_prove_cold_and_hit_and_record_what_sglang_ran(tmp_path):
    r = sweep(tmp_path, "--residues", "3-5")
    assert r.returncode == 0, r.stderr[-2000:]
    recs = records(tmp_path)
    assert [(x["residue"], x["phase"]) for x in recs] == [
        (3, "cold"), (3, "self-hit"), (4, "cold"), (4, "self-hit"), (5, "cold"), (5, "self-hit")]
    for x in recs:
        assert x["verdict"] == "ok" and x["engine_version"] == "0.5.12+fake"
        # no prompt_tokens_details on a cold answer: 0 under --enable-cache-report
        want = 0 if x["phase"] == "cold" else x["prompt_tokens"] // 128 * 128
        assert x["cached_tokens"] == want
        c = x["config"]
        assert c["config_source"] == "the server's /server_info (internal_states[0])"
        assert c["sglang"]["speculative_algorithm"] == "NGRAM"
        assert (c["block_size"], c["method"], c["draft_tokens"], c["patches"]) == (128, "ngram", 3, "none")
    text = report(tmp_path)
    assert "no rule: measured only" in text and "no break seen" in text
    assert "--patches none" in text   # the rerun line says what ran


def test_reset_empties_the_radix_cache_with_flush_cache(tmp_path):
    r = sweep(tmp_path, "--isolation", "reset", "--residues", "3-5")
    assert r.returncode == 0, r.stderr[-2000:]
    recs = records(tmp_path)
    # one server for the three points: each later cold request would hit the earlier
    # prompts' shared prefix had /flush_cache not emptied the cache (the fake has no
    # /reset_prefix_cache: a failed reset would be recorded, and the cold phase invalid)
    assert len({x["server_boot"]["log"] for x in recs if x.get("server_boot")}) == 1
    assert all(x["cached_tokens"] == 0 for x in recs if x["phase"] == "cold")
    assert all(x["verdict"] == "ok" and not x.get("reset_error") for x in recs)


def test_a_broken_hit_is_found_measured_not_predicted_and_explained(tmp_path):
    broken = {"FAKE_SGLANG_BREAK_RESIDUE": "4"}
    r = sweep(tmp_path, "--residues", "3-5", env=broken)
    assert r.returncode == 1, r.stderr[-2000:]
    bad = [(x["residue"], x["phase"]) for x in records(tmp_path) if x["verdict"] != "ok"]
    assert bad == [(4, "self-hit")]
    text = report(tmp_path)
    assert "no rule: measured only" in text and "broken at residue 4" in text
    assert "the final prefill chunk the rule names" not in text   # no rule names one
    (run,) = [p.stem for p in (tmp_path / "out").glob("*.jsonl")]
    full = {**os.environ, **broken, "PYTHONPATH": f"{FAKE}{os.pathsep}{ROOT}"}
    e = subprocess.run([sys.executable, "-m", "harness", "explain", run, "--out",
                        str(tmp_path / "out")], cwd=ROOT, env=full, capture_output=True,
                       text=True, timeout=240)
    assert e.returncode == 0, e.stderr[-2000:]
    rows = {ln.split("  ")[0]: ln for ln in e.stdout.splitlines()}
    assert "276/276" in rows["prefix caching → off"]   # the one discriminator
    assert "not run" in rows["patches → all"] and "--patches none" in rows["patches → all"]
    assert "not run" in rows["block size → 16"]


@pytest.mark.parametrize("args,needles", [
    (("--poison", "on"), ("--poison on", "--engine sglang", "not supported by this engine")),
    (("--isolation", "restore"), ("--isolation restore", "--isolation fresh")),
    (("--patches", "all"), ("--engine sglang", "--patches none"))])
def test_what_sglang_cannot_do_is_refused_in_one_line(tmp_path, args, needles):
    one_line_exit_2(sweep(tmp_path, "--residues", "3", *args), *needles)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.jsonl"))


def test_dry_run_prints_the_launch_line(tmp_path):
    r = sweep(tmp_path, "--residues", "3", "--dry-run")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "-m sglang.launch_server --model-path" in r.stdout
    assert "--speculative-algorithm NGRAM --speculative-num-draft-tokens 4" in r.stdout
    assert "--enable-cache-report" in r.stdout


@pytest.mark.skipif(sglang_installed(), reason="a real SGLang is installed here: the sweep "
                    "would boot it, not stop (tests/sglang/args.py)")
def test_without_sglang_the_sweep_stops_in_one_line_before_any_server(tmp_path):
    full = {**os.environ, "PYTHONPATH": str(ROOT)}   # no fake: no sglang at all
    r = subprocess.run([sys.executable, "-m", "harness", "--engine", "sglang", "--model",
                        str(TOKENIZER), "--residues", "3", "--out", str(tmp_path / "out")],
                       cwd=ROOT, env=full, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr[-2000:]
    assert "SGLang is not installed" in r.stderr and "Traceback" not in r.stderr


def test_a_serve_line_needs_sglangs_own_parser(tmp_path):
    r = sweep(tmp_path, "--serve", f"sglang serve --model-path {TOKENIZER} --page-size 64")
    assert r.returncode == 3, r.stderr[-2000:]
    (line,) = r.stderr.strip().splitlines()
    assert "SGLang's own argument parser cannot be built here" in line
