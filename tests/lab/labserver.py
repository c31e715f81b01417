"""Helpers for the lab engine tests: start a real server process on a free port, build
chat prompts aimed at a residue of the templated length, read /metrics counters."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

from harness.server_pool import holds_listener

ROOT = Path(__file__).resolve().parents[2]

WORDS = ("amber lantern quietly folds the narrow river under seven copper bridges while "
         "a patient heron counts silver reeds beside the hollow mill and morning fog drifts "
         "over wheat fields toward distant granite hills where old shepherds mend their "
         "woollen cloaks and tell slow stories about winter storms").split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_document(n_lines: int, seed: int = 0, width: int = 9) -> list[str]:
    """Deterministic document lines (each line distinct), e.g. '017. amber lantern ...'."""
    out = []
    for i in range(n_lines):
        words = [WORDS[(seed * 7 + i * 5 + j * 3) % len(WORDS)] for j in range(width)]
        out.append(f"{i + 1:03d}. " + " ".join(words) + ("." if i % 3 else ","))
    return out


MTP = '{"method": "mtp", "num_speculative_tokens": 3}'
DFLASH7 = '{"method": "dflash", "num_speculative_tokens": 7}'
DFLASH3 = '{"method": "dflash", "num_speculative_tokens": 3}'
FULL = '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'
PIECEWISE = '{"cudagraph_mode": "PIECEWISE"}'
HUGE = ["--enable-prefix-caching", "--block-size", "128", "--prefix-match-unit", "128",
        "--enable-prompt-tokens-details"]


class LabServer:
    def __init__(self, args: list[str], port: int, proc: subprocess.Popen, log_path: Path):
        self.args, self.port, self.proc, self.log_path = args, port, proc, log_path
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def poison(self) -> dict:
        """Fill the stale state as ``sweep --poison`` does before a server's first request
        (arm, then the fill; engine/lab/poison.py): a corrupted replay then reads the fixed
        pattern, not this process's own boot contents. The fill's proof."""
        self.http.post("/collective_rpc", json={"method": "residue_lab_arm"}).raise_for_status()
        r = self.http.post("/collective_rpc", json={"method": "residue_lab_poison",
                                                   "args": ["state,kv,builders", "A"]})
        r.raise_for_status()
        proof = r.json()["results"][0]
        assert proof["ok"], proof
        return proof

    def chat(self, content: str, max_tokens: int | None = 2000, **extra) -> dict:
        body = {"model": "lab-copy", "messages": [{"role": "user", "content": content}], **extra}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        r = self.http.post("/v1/chat/completions", json=body)
        r.raise_for_status()
        return r.json()

    def templated_len(self, content: str) -> int:
        r = self.http.post("/tokenize", json={"messages": [{"role": "user", "content": content}],
                                              "add_generation_prompt": True})
        r.raise_for_status()
        return r.json()["count"]

    def counters(self) -> dict[str, float]:
        text = self.http.get("/metrics").text
        out: dict[str, float] = {}
        for line in text.splitlines():
            m = re.match(r"^(vllm:[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
            if m:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
        return out


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 20.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before /health")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200 \
                    and holds_listener(proc.pid, port):   # not another test's server
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.01)
    raise TimeoutError("server did not become healthy")


def start(args: list[str], log_path: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    f = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "engine.lab", "--port", str(port), *args],
                            cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env)
    f.close()
    return proc, port


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE


def start_healthy(args: list[str], log_path: Path, tries: int = 3) -> tuple[subprocess.Popen, int]:
    """A server healthy on its own port: a free port that another test's server bound
    first makes ours exit ("address already in use"), and it starts again on another."""
    proc, port = start(args, log_path)
    try:
        wait_healthy(port, proc)
        return proc, port
    except RuntimeError:
        stop(proc)
        taken = "address already in use" in log_path.read_text(errors="replace").lower()
        if not taken or tries <= 1:
            raise
    return start_healthy(args, log_path, tries - 1)


@contextmanager
def lab_server(args: list[str], log_path: Path):
    proc, port = start_healthy(args, log_path)
    try:
        srv = LabServer(args, port, proc, log_path)
        try:
            yield srv
        finally:
            srv.http.close()
    finally:
        stop(proc)


def pad_to_residue(srv: LabServer, build, residue: int, modulus: int = 128,
                   minimum: int = 0) -> tuple[str, int]:
    """build(n_pad) -> user content. Returns (content, templated length) with
    templated length ≡ residue (mod modulus) and >= minimum. Each pad unit must add about
    one token; verified through /tokenize."""
    base = srv.templated_len(build(0))
    n = 0
    for _ in range(8):
        length = srv.templated_len(build(n))
        need = (residue - length) % modulus
        if length + need < minimum:
            need += modulus * -(-(minimum - length - need) // modulus)
        if need == 0:
            return build(n), length
        n += need
    raise AssertionError(f"could not reach residue {residue} (base {base})")


def padding(n: int) -> str:
    """A padding line that grows by one token per unit: '~~~~~~~~ the the the ...'."""
    return " ".join(["~" * 8] + ["the"] * n)
