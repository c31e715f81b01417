"""Boot: flags, the KV capacity check (vLLM's message, exit before listening), speed."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from labserver import ROOT, free_port, start, stop, wait_healthy

KV_MEM = str(int(4.9 * 2**30))


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.lab", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_capacity_failure_exits_before_listening():
    port = free_port()
    r = run_cli("--port", str(port), "--kv-cache-memory-bytes", KV_MEM, "--max-model-len",
                "245760", "--speculative-config",
                '{"method": "dflash", "num_speculative_tokens": 15}')
    assert r.returncode != 0
    assert ("ValueError: To serve at least one request with the model's max seq len (245760), "
            "5.16 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(4.90 GiB).") in r.stderr
    assert "Uvicorn running" not in r.stderr
    with socket.socket() as s:  # nothing ever listened there
        s.bind(("127.0.0.1", port))


def _pool(bytes_per_token: int, block: int = 128) -> str:
    return f"{int(KV_MEM) // bytes_per_token // block * block:,}"


# bytes/token = (16 target + drafter attention layers) x 1 KiB (config.json)
@pytest.mark.parametrize("spec,max_len,tokens", [
    ('{"method": "dflash", "num_speculative_tokens": 15}', 221184, _pool(22 * 1024)),
    ('{"method": "dflash", "num_speculative_tokens": 7}', 245760, _pool(20 * 1024)),
    ('{"method": "mtp", "num_speculative_tokens": 3}', 245760, _pool(17 * 1024)),
    ('{"method": "ngram", "num_speculative_tokens": 3}', 245760, _pool(16 * 1024)),
])
def test_capacity_boots(tmp_path, spec, max_len, tokens):
    log = tmp_path / "srv.log"
    proc, port = start(["--kv-cache-memory-bytes", KV_MEM, "--max-model-len", str(max_len),
                        "--speculative-config", spec, "--block-size", "128"], log)
    try:
        wait_healthy(port, proc)
        text = log.read_text()
        assert "GPU KV cache size:" in text
        if tokens:
            assert f"GPU KV cache size: {tokens} tokens" in text
        # uvicorn logs this once its socket listens, so /health can answer just before it
        assert _log_says(log, "Uvicorn running on http://127.0.0.1:", within=10)
    finally:
        stop(proc)


def _log_says(log, line: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while line not in log.read_text():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)      # polling the log for the line itself, bounded above
    return True


@pytest.mark.parametrize("args,fragment", [
    (["--block-size", "0"], "--block-size"),
    (["--patches", "everything"], "unknown patch"),
    (["--speculative-config", "{not json"], "--speculative-config"),
    (["--speculative-config", '{"method": "medusa", "num_speculative_tokens": 3}'], "method"),
    (["--speculative-config", '{"method": "dflash", "num_speculative_tokens": 16}'], "checkpoint"),
    (["-cc", '{"cudagraph_mode": "FULLEST"}'], "cudagraph_mode"),
    (["-cc", '{"max_cudagraph_capture_size": 0}'], "max_cudagraph_capture_size"),
    (["--block-size", "128", "--prefix-match-unit", "100"], "--prefix-match-unit"),
    (["--geometry", "sparse"], "--geometry"),
    (["--mamba-cache-mode", "partial"], "--mamba-cache-mode"),
    (["--max-model-len", "999999999"], "max_position_embeddings"),
])
def test_bad_flags_one_line_exit_2(args, fragment):
    r = run_cli("--port", "1", *args)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and fragment in lines[0], r.stderr


def test_help_documents_every_flag():
    r = run_cli("--help")
    assert r.returncode == 0
    for flag in ("--model", "--served-model-name", "--host", "--port", "--enable-prefix-caching",
                 "--no-enable-prefix-caching", "--block-size", "--prefix-match-unit",
                 "--speculative-config", "-cc", "--compilation-config", "--max-model-len",
                 "--kv-cache-memory-bytes", "--max-num-batched-tokens",
                 "--enable-prompt-tokens-details", "--api-key", "--seed", "--patches",
                 "--geometry", "--mamba-cache-mode", "align", "prefill-discriminator", "sliding-window-guard"):
        assert flag in r.stdout, flag


def test_boot_is_fast_and_sigterm_exits_clean(tmp_path):
    proc, port = start([], tmp_path / "srv.log")
    try:
        boot = wait_healthy(port, proc)
        # generous bound: CI boxes are shared; the measured number is in docs/lab-engine.md
        assert boot < 15.0
    finally:
        proc.terminate()
        # graceful shutdown; uvicorn re-raises the captured SIGTERM after it (-15)
        assert proc.wait(5) in (0, -15)
        stop(proc)


def test_port_in_use_fails_non_zero(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run_cli("--port", str(port))
        assert r.returncode != 0


@pytest.mark.parametrize("given, want", [("5368709120", 5 * 2**30), ("5G", 5 * 2**30),
                                         ("5g", 5 * 10**9), ("1.5K", 1536), ("25.6k", 25600)])
def test_kv_cache_memory_bytes_reads_vllms_size_spellings(given, want):
    """vLLM's CLI takes sizes as human-readable integers (upper case binary, lower case
    decimal): the lab, which mirrors that CLI, reads a `vllm serve` line's size the same."""
    from engine.lab.cli import build_parser
    assert build_parser().parse_args(["--kv-cache-memory-bytes", given]).kv_cache_memory_bytes == want


def test_kv_cache_memory_bytes_refuses_what_is_not_a_size():
    from engine.lab.cli import build_parser
    for bad in ("5GB", "5 G", "0", "-1", "0G"):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(["--kv-cache-memory-bytes", bad])
        assert e.value.code == 2, bad
