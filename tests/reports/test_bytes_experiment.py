"""Issue 48's device experiment without a GPU: which servers it starts and with what (the
mode on every one, a cache of its own each, the pins on one per k only), and what its summary
concludes from records (synthetic here; the device's come back to reports/)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_bytes_experiment import FIRST, command, pin_fa_argv  # noqa: E402
from gpu_bytes_summary import answer, servers, summarize  # noqa: E402


def _site(tmp_path: Path, attention: bool, env: bool) -> Path:
    (tmp_path / "vllm" / "config").mkdir(parents=True)
    (tmp_path / "vllm" / "config" / "attention.py").write_text(
        "flash_attn_max_num_splits_for_cuda_graph: int = 32" if attention else "")
    (tmp_path / "vllm" / "envs.py").write_text(
        "VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH" if env else "")
    return tmp_path


def test_every_server_runs_the_mode_in_a_cache_of_its_own_and_only_pin_pins(tmp_path):
    site = _site(tmp_path, attention=True, env=False)
    roots = set()
    for i, (name, k, kind) in enumerate(FIRST):
        argv, env, pinned = command("M", 8500 + i, k, kind, tmp_path / "c" / name, site)
        assert env["VLLM_TRITON_FORCE_FIRST_CONFIG"] == "1" and "--worker-extension-cls" in argv
        spec = json.loads(argv[argv.index("--speculative-config") + 1])
        assert spec["num_speculative_tokens"] == k and spec["method"] == "ngram"
        assert '"combo_kernels":false' in argv[argv.index("--compilation-config") + 1]
        roots.add(env["VLLM_CACHE_ROOT"])
        assert ("--attention-config" in argv) == (kind == "pin") == bool(pinned)
        assert ("CUBLASLT_WORKSPACE_SIZE" in env) == (kind == "pin")
    assert len(roots) == len(FIRST)
    assert sum(1 for _, k, kind in FIRST if k == 4 and kind == "own") == 2


def test_the_fa_pin_follows_the_vllm_on_the_path(tmp_path):
    assert pin_fa_argv(_site(tmp_path / "a", attention=True, env=True))[0][0] == "--attention-config"
    assert pin_fa_argv(_site(tmp_path / "b", attention=False, env=True)) == (
        [], {"VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH": "1"})
    assert pin_fa_argv(_site(tmp_path / "c", attention=False, env=False)) == ([], {})


def _recs(own_shas, copy_sha, fps=("f1", "f2", "f3")):
    gpu = [{"index": "0", "model": "NVIDIA H100 80GB HBM3"}]
    out = []
    def server(name, kind, sha, fp, **extra):
        out.append({"server": name, "k": 4, "kind": kind, **extra})
        out.append({"server": name, "boot": "ready", "gpu": gpu, "compile": {"fingerprint": fp},
                    "compile_cache": "hit" if kind == "copy" else "miss"})
        out.append({"server": name, "residue": 5, "phase": "cold", "ok": False, "sha": sha})
        out.append({"server": name, "residue": 4, "phase": "reset-cold", "ok": True, "sha": "okok"})
    for i, (sha, fp) in enumerate(zip(own_shas, fps)):
        server(f"k4-own{i}", "own", sha, fp)
    server("k4-copy0", "copy", copy_sha, "f1", source="k4-own0")
    return out


def test_the_summary_says_what_the_bytes_follow(tmp_path):
    machine = answer(servers(_recs(["aaa", "aaa", "aaa"], "aaa")), 4)
    assert "every compile of this machine agrees" in machine
    assert "k4-copy0 (copy, fingerprint f1, cache hit): the same bytes as its source" in machine
    split = answer(servers(_recs(["aaa", "bbb", "aaa"], "ccc")), 4)
    assert "other answers between compiles" in split and "other bytes than its source" in split
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _recs(["aaa"] * 3, "aaa")))
    table = summarize([path])
    assert "| k4-own0 | own | NVIDIA H100 80GB HBM3 (0) | `f1` | miss | ok okok | not ok aaa |" in table
    cli = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_bytes_experiment.py"),
                          "--summarize", str(tmp_path)], capture_output=True, text=True)
    assert cli.returncode == 0 and "k4-copy0" in cli.stdout, cli.stderr[-2000:]


def test_the_whole_run_on_lab_servers_records_every_server_and_copy(tmp_path, monkeypatch):
    """run_all end to end with the lab engine standing in for vLLM (the same routes: health,
    chat, /collective_rpc, /reset_prefix_cache): every server boots, records its GPU and
    fingerprint fields, answers its cells; the copies start from their source's cache."""
    import argparse
    import gpu_bytes_experiment as exp
    from harness.serve.engines import LAB_MODEL_DIR

    def lab_command(model, port, k, kind, cache, site):
        spec = json.dumps({"method": "ngram", "num_speculative_tokens": k})
        argv = [sys.executable, "-m", "engine.lab", "--model", str(LAB_MODEL_DIR), "--port",
                str(port), "--enable-prefix-caching", "--block-size", "128",
                "--prefix-match-unit", "128", "--speculative-config", spec,
                "--mamba-cache-mode", "align", "--patches", "none",
                "--enable-prompt-tokens-details"]
        (cache / "vllm").mkdir(parents=True, exist_ok=True)
        return argv, {"PYTHONPATH": str(ROOT)}, ({"fa_splits": "lab"} if kind == "pin" else {})
    monkeypatch.setattr(exp, "command", lab_command)
    carried = tmp_path / "carried" / "k4-own0"   # as another machine's cache unpacks
    index = carried / "vllm" / "torch_compile_cache" / "1f4f224191" / "vllm_compile_cache.py"
    index.parent.mkdir(parents=True)
    index.write_text("{'graph_handle': ('a0', '/tmp/rl-bytes-caches/k4-own0/vllm/"
                     "torch_compile_cache/1f4f224191/a0')}")
    args = argparse.Namespace(out=tmp_path / "out", caches=tmp_path / "caches", limit=200.0,
                              model=str(LAB_MODEL_DIR), machine="cpu", site=None,
                              from_cache=carried)
    assert exp.run_all(args) == 0
    srv = servers([json.loads(line) for line in (tmp_path / "out" / "records.jsonl").open()])
    assert set(srv) == {n for n, _, _ in FIRST} | set(exp.COPIES) | {n for n, _ in exp.CARRIED}
    # a carried copy loads its own artefacts: the index names its folder, not the source's
    moved = (tmp_path / "caches" / "k3-carried" / index.relative_to(carried)).read_text()
    assert f"'{tmp_path / 'caches' / 'k3-carried'}/vllm/" in moved and "rl-bytes" not in moved
    for name, s in srv.items():
        assert "problem" not in s, (name, s.get("problem"))
        assert set(s["cells"]) == {(r, p) for r, p in exp.SENDS[s["k"]]}, name
    assert srv["k4-copy0"]["source"] == "k4-own0"
    assert (tmp_path / "caches" / "k4-copy0" / "vllm").is_dir()
    table = summarize([tmp_path / "out" / "records.jsonl"])
    assert "ngram k = 4: 2 own-cache servers" in table
    assert "k4-carried (carried" in table and "(its cache: carried:k4-own0)" in table
