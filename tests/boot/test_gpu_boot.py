"""benchmarks/gpu_boot.py: the dry run prints every command and starts nothing; a bad
argument is one line and exit 2; on the lab engine the whole benchmark runs for real."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_boot.py"


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_dry_run_prints_every_variant_and_starts_nothing(tmp_path):
    out = tmp_path / "o"
    cache = tmp_path / "cache"
    r = run("--dry-run", "--out", str(out), "--cache-dir", str(cache),
            "--variants", "plain,caches,preimport,both,forkcore")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    for v in ("plain", "caches", "preimport", "both", "forkcore"):
        assert f"## {v}:" in text
    assert "-m vllm.entrypoints.openai.api_server --model" in text
    assert "--language-model-only" in text and "--gdn-prefill-backend triton" in text
    assert "-m engine.prefork --preload torch,vllm,vllm.entrypoints.openai.api_server" in text
    assert "VLLM_WORKER_MULTIPROC_METHOD=fork" in text
    assert f"VLLM_CACHE_ROOT={cache}/vllm" in text                  # shared
    assert f"TRITON_CACHE_DIR={cache}-own/plain-rN/triton" in text   # own, empty
    assert "nothing started (--dry-run)" in text
    assert not out.exists() and not cache.exists()


def test_user_errors_are_one_line_exit_2(tmp_path):
    for args in (["--variants", "plain,turbo"], ["--residues", "4,x"], ["--residues", "200"],
                 ["--model", str(tmp_path / "none")]):
        r = run("--dry-run", "--out", str(tmp_path), *args)
        assert r.returncode == 2, args
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("gpu_boot: error:"), r.stderr


@pytest.mark.slow
def test_lab_run_boots_each_variant_and_compares_answers(tmp_path):
    out = tmp_path / "o"
    r = run("--engine", "lab", "--out", str(out), "--rounds", "1", "--variants", "plain,both",
            "--cache-dir", str(tmp_path / "cache"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data = json.loads((out / "gpu_boot.json").read_text())
    assert data["fork_server"]["usable"] is True
    boots = {b["variant"]: b for b in data["boots"] if not b.get("warm_up")}
    assert boots["plain"]["how"] == "plain" and boots["both"]["how"] == "forked"
    for b in boots.values():
        assert b["survivors"] == [] and b["boot_s"] > 0 and "error" not in b
        assert [c["residue"] for c in b["cells"]] == [4, 3, 5]
        assert all(c["prompt_tokens"] == c["target_len"] for c in b["cells"])
    both = next(r for r in data["summary"] if r["variant"] == "both")
    assert both["identical_to_plain"] == "3/3"
    assert "| both | 1 | 1 |" in r.stdout
    assert not (tmp_path / "cache-own" / "plain-r1").exists()      # removed after the boot


def test_the_budget_expects_each_variant_at_its_own_pace():
    # Call 4 on the H200: a cold-cache `plain` boot took 203 s; budgeting the warm variants
    # at that pace stopped the run before them. Each variant is budgeted at its own slowest
    # boot, else at the slowest boot with its cache setting.
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_boot", SCRIPT)
    gb = importlib.util.module_from_spec(spec)
    sys.modules["gpu_boot"] = gb        # its dataclasses look their module up
    try:
        spec.loader.exec_module(gb)
    finally:
        sys.modules.pop("gpu_boot", None)
    boots = [{"variant": "caches", "boot_s": 67.2}, {"variant": "plain", "boot_s": 202.8}]
    assert gb.expected_boot_s(boots, "caches") == 67.2
    assert gb.expected_boot_s(boots, "both") == 67.2          # shared caches, like the warm-up
    assert gb.expected_boot_s(boots, "preimport") == 202.8    # empty caches, like plain
    assert gb.expected_boot_s(boots + [{"variant": "both", "boot_s": 30.5}], "both") == 30.5
    assert gb.expected_boot_s([{"variant": "caches", "boot_s": None}], "plain") == 0.0
