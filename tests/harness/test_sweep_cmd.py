"""End to end through the real CLI against the fake engine (``--engine cmd``): real
server processes on 127.0.0.1, faults chosen by the test, nothing left behind."""
from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, fake_cmd

pytestmark = pytest.mark.usefixtures("no_leftovers")


def fake_sweep(cli, tok_dir: Path, *args: str, server: tuple[str, ...] = (),
               timeout: float = 180, check_rc: int | None = None, out: str = "results"):
    """A sweep of the fake engine (``server``: its fault flags) through ``cli``."""
    return cli.sweep("--engine", "cmd", "--model", tok_dir,
                     "--server-cmd", fake_cmd(tok_dir, *server), "--context", "800", *args,
                     out=out, rc=check_rc, timeout=timeout)


def cells(recs):
    return {(r["residue"], r["phase"]): r for r in recs}


@pytest.mark.slow
def test_breaks_exactly_at_the_chosen_residue(tmp_path, tok_dir, cli):
    proc = fake_sweep(cli, tok_dir, "--residues", "4-9", "--slots", "2",
                 server=("--break-residue", "7"), check_rc=1)
    c = cells(cli.records())
    assert len(c) == 12
    bad = {k for k, r in c.items() if r["verdict"] != "ok"}
    assert bad == {(7, "self-hit")}
    r = c[(7, "self-hit")]
    assert r["verdict"] == "broken" and r["content_was_null"] and r["answer"] == ""
    assert r["sha1"].startswith("da39a3ee5e6b") and r["computed_tail"] == 7
    assert r["prompt_tokens"] == r["target_len"] and r["target_len"] % 128 == 7
    assert c[(7, "cold")]["cached_tokens"] == 0
    for (res, phase), rec in c.items():
        assert rec["templated_len_source"] == "server /tokenize"
        assert "--residues " + str(res) in rec["rerun"]
    assert "results:" in proc.stderr and list((tmp_path / "reports").glob("*.md"))
    manifest = json.loads(next((tmp_path / "results").glob("*.manifest.json")).read_text())
    assert manifest["exit_code"] == 1 and manifest["interrupted"] is False
    assert "6 of 128 residues" in json.dumps(manifest["sampled"])


def test_all_clean_exits_zero(tmp_path, tok_dir, cli):
    fake_sweep(cli, tok_dir, "--residues", "0,1", "--phases", "cold,warm,self-hit",
          check_rc=0)
    c = cells(cli.records())
    assert {r["verdict"] for r in c.values()} == {"ok"}
    assert c[(0, "warm")]["cached_tokens"] > 0


def test_boot_failure_is_recorded_with_the_log_lines(tmp_path, tok_dir, cli):
    msg = ("To serve at least one request with the model's max seq len (245760), 5.16 GiB KV "
           "cache is needed, which is larger than the available KV cache memory (4.90 GiB)")
    fake_sweep(cli, tok_dir, "--residues", "3", server=("--boot-fail", shlex.quote(msg)), check_rc=1)
    recs = cli.records()
    assert [r["verdict"] for r in recs] == ["boot-fail", "boot-fail"]
    assert "KV cache is needed" in recs[0]["reason"]
    assert any("5.16 GiB" in ln for ln in recs[0]["log_excerpt"])


def test_crash_mid_request_and_the_sweep_goes_on(tmp_path, tok_dir, cli):
    fake_sweep(cli, tok_dir, "--residues", "4-6", server=("--crash-residue", "5"), check_rc=1)
    c = cells(cli.records())
    assert c[(5, "cold")]["verdict"] == "crash"
    assert "dead" in c[(5, "cold")]["reason"]
    assert any("FATAL" in ln for ln in c[(5, "cold")]["log_excerpt"])
    assert c[(5, "self-hit")]["verdict"] == "crash"
    assert "earlier phase" in c[(5, "self-hit")]["reason"]
    assert all(c[(r, p)]["verdict"] == "ok" for r in (4, 6) for p in ("cold", "self-hit"))


def test_timeout_kills_the_stuck_server(tmp_path, tok_dir, cli):
    fake_sweep(cli, tok_dir, "--residues", "8,9", "--timeout", "2",
          server=("--hang-residue", "9"), check_rc=1)
    c = cells(cli.records())
    assert c[(9, "cold")]["verdict"] == "timeout"
    assert c[(9, "self-hit")]["verdict"] == "timeout"
    assert c[(8, "self-hit")]["verdict"] == "ok"


def test_no_cache_hit_is_invalid_not_ok(tmp_path, tok_dir, cli):
    fake_sweep(cli, tok_dir, "--residues", "3", server=("--unit", "100000"), check_rc=1)
    c = cells(cli.records())
    assert c[(3, "cold")]["verdict"] == "ok"
    assert c[(3, "self-hit")]["verdict"] == "invalid"
    assert "no prefix-cache hit" in c[(3, "self-hit")]["reason"]


def test_server_without_tokenize_uses_the_local_tokenizer(tmp_path, tok_dir, cli):
    fake_sweep(cli, tok_dir, "--residues", "2", server=("--no-tokenize",), check_rc=0)
    assert {r["templated_len_source"] for r in cli.records()} == {"local tokenizer"}


def test_reference_cold(tmp_path, tok_dir, cli):
    fake_sweep(cli, tok_dir, "--residues", "6,7", "--reference", "cold",
          server=("--break-residue", "6"), check_rc=1)
    c = cells(cli.records())
    assert c[(6, "self-hit")]["verdict"] == "broken"
    assert c[(6, "self-hit")]["reference_sha1"] == c[(6, "cold")]["sha1"]
    assert c[(7, "self-hit")]["verdict"] == "ok"


@pytest.mark.slow
def test_ctrl_c_then_resume_loses_and_duplicates_nothing(tmp_path, tok_dir, cli):
    out = tmp_path / "results"
    argv = [sys.executable, "-m", "harness", "--engine", "cmd", "--model", str(tok_dir),
            "--server-cmd", fake_cmd(tok_dir), "--context", "800", "--residues", "0-11",
            "--slots", "1", "--out", str(out), "--reports-dir", str(tmp_path / "reports"),
            "--no-progress"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while True:  # wait for real progress (bounded), then interrupt
        files = list(out.glob("*.jsonl"))
        if files and len(files[0].read_text().splitlines()) >= 5:
            break
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError("the sweep made no progress to interrupt (or ended first)")
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "sweep --resume" in err
    run_id = next(out.glob("*.jsonl")).name[: -len(".jsonl")]
    before = [json.loads(l) for l in (out / f"{run_id}.jsonl").read_text().splitlines() if l]
    assert 5 <= len(before) < 24
    manifest = json.loads((out / f"{run_id}.manifest.json").read_text())
    assert manifest["interrupted"] is True
    resumed = cli.sweep("--resume", run_id, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = [json.loads(l) for l in (out / f"{run_id}.jsonl").read_text().splitlines() if l]
    keys = [(r["residue"], r["phase"]) for r in after]
    assert len(keys) == len(set(keys)) == 24
    # every record finished before the interrupt for a complete point survives untouched
    complete = {r["residue"] for r in before if sum(b["residue"] == r["residue"] for b in before) == 2}
    kept = {(r["residue"], r["phase"], r["started_at"]) for r in after}
    for r in before:
        if r["residue"] in complete:
            assert (r["residue"], r["phase"], r["started_at"]) in kept


@pytest.mark.parametrize("args,flag", [
    (["--spec", "bogus"], "--spec"),
    (["--cudagraph", "FULLISH"], "--cudagraph"),
    (["--residues", "130"], "--residues"),
    (["--residues", "sample:x"], "--residues"),
    (["--phases", "hot"], "--phases"),
    (["--isolation", "cozy"], "--isolation"),
    (["--patches", "everything"], "--patches"),
    (["--reference", "cold", "--phases", "self-hit"], "--reference"),
    (["--gpus", "a,b"], "--gpus"),
    (["--context", "-5"], "--context"),
    (["--engine", "cmd"], "--engine cmd"),
    (["--modulus", "zero"], "--modulus"),
    (["--engine", "cmd", "--server-cmd", "serve --port {port} --name 'x"], "--server-cmd"),
    (["--resume", "no-such-run"], "--resume"),
])
def test_bad_flags_are_one_line_exit_2(tmp_path, args, flag, cli):
    proc = cli("--out", tmp_path, *args, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("sweep: error:") and flag in lines[0]
    assert "Traceback" not in proc.stderr


def test_dry_run_starts_nothing(tmp_path, tok_dir, cli):
    proc = fake_sweep(cli, tok_dir, "--residues", "risky", "--dry-run", check_rc=0)
    assert "fake_engine.py --port '{port}'" in proc.stdout or "fake_engine.py --port {port}" in proc.stdout
    assert "nothing started" in proc.stdout
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_without_a_local_tokenizer_a_probe_server_plans(tmp_path, tok_dir, cli):
    # --model names no tokenizer: prompts are planned against the server's /tokenize
    proc = cli.sweep("--engine", "cmd", "--server-cmd", fake_cmd(tok_dir, "--break-residue", "5"),
                     "--context", "800", "--residues", "4-5", timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    c = cells(cli.records())
    assert c[(5, "self-hit")]["verdict"] == "broken" and c[(4, "self-hit")]["verdict"] == "ok"
    assert list((tmp_path / "results").glob("*.logs/*-probe-*.log"))


@pytest.mark.slow
def test_reference_golden_run(tmp_path, tok_dir, cli):
    # a trusted run first, then a run judged against its sha1s (same prompts)
    fake_sweep(cli, tok_dir, "--residues", "3-5", check_rc=0, out="a/results")
    golden = next((tmp_path / "a" / "results").glob("*.jsonl"))
    run_id = golden.name[: -len(".jsonl")]
    out = tmp_path / "a" / "results"
    proc = fake_sweep(cli, tok_dir, "--residues", "3-5", "--reference", f"golden:{run_id}",
                      server=("--break-residue", "4"), out="a/results", timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    gold = {(r["residue"], r["phase"]): r["sha1"] for r in
            (json.loads(l) for l in golden.read_text().splitlines())}
    new = [json.loads(l) for l in next(p for p in out.glob("*.jsonl") if p != golden)
           .read_text().splitlines()]
    c = cells(new)
    assert c[(4, "self-hit")]["verdict"] == "broken"
    assert c[(4, "self-hit")]["reference_sha1"] == gold[(4, "cold")]
    assert c[(3, "cold")]["verdict"] == "ok" and c[(3, "cold")]["reference"].startswith("golden:")


def test_unknown_golden_run_is_a_usage_error(tmp_path, tok_dir, cli):
    proc = fake_sweep(cli, tok_dir, "--residues", "3", "--reference", "golden:nope")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and last.startswith("sweep: error: --reference") and "nope" in last


def test_a_configuration_that_never_boots_is_not_booted_for_every_residue(tmp_path, tok_dir, cli):
    fake_sweep(cli, tok_dir, "--residues", "0-5", "--slots", "1",
          server=("--boot-fail", "'no GPU memory left'"), check_rc=1)
    recs = cli.records()
    assert len(recs) == 12 and {r["verdict"] for r in recs} == {"boot-fail"}
    # bounded: 2 points x 2 boot attempts (issue 33 item 8), then the rest unstarted
    assert len(list((tmp_path / "results").glob("*.logs/*.log"))) == 4
    skipped = [r for r in recs if r["reason"].startswith("not started")]
    assert len(skipped) == 8 and "failed to boot 2x" in skipped[0]["reason"]
    tried = [r for r in recs if not r["reason"].startswith("not started")]
    assert {r["server_boot"]["attempts"] for r in tried} == {2}
    assert "failed 2 of 2 boot attempts" in tried[0]["reason"]
