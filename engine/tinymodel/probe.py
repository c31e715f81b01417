"""Serve tiny models with a real vLLM and send harness-planned prompts cold and again.

python -m engine.tinymodel probe --server NAME=MODEL_DIR:CUDAGRAPH_MODE [--server ...]
       --out DIR [--residues 3,4,5,60] [--context 1200] [--boot-timeout 240]

All servers start at once (own session, ``setsid``), each is polled on ``/health``;
prompts are planned with ``engine.prompts.plan`` and a local ``ChatTokenizer`` on the
model dir (document seed ``100 + residue``, so residues share no 128-token block), their
templated length is checked with the server's ``/tokenize``, then each is sent twice
(``cold`` and ``self_hit``), temperature 0. Results: ``probe.json`` (answers, usage,
verbatim), ``vllm_<name>.log`` and ``log_<name>.txt`` (lines about runner / graph mode /
KV / GDN), ``metrics_<name>.txt``. Every server's process group is killed at the end.

Flags are those shared/gpu/README.md measured for the hybrid on vLLM 0.26.0.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

SPEC = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,"prompt_lookup_min":2}'
ENV = dict(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
           VLLM_USE_FLASHINFER_SAMPLER="0")
LOG_PATTERNS = re.compile(
    r"runner|Runner|cudagraph|CUDA graph|CUDAGraph|graph capturing|Graph capturing|KV cache|"
    r"kv cache|mamba|Mamba|GDN|prefill kernel|Padding|prefix|ngram|async|Maximum concurrency|"
    r"attention backend|Attention backend|Using .*backend|language.model.only|"
    r"Resolved architecture|dtype|compile|Error|ERROR|Traceback|WARNING", re.I)


def server_cmd(model: str, port: int, graph_mode: str, hybrid: bool, gpu_util: float) -> list[str]:
    cmd = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", model,
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "bfloat16", "--max-model-len", "32768", "--enable-prefix-caching",
           "--block-size", "128", "--prefix-match-unit", "128",
           "--enable-prompt-tokens-details", "--speculative-config", SPEC,
           "--compilation-config", json.dumps({"cudagraph_mode": graph_mode}),
           "--gpu-memory-utilization", str(gpu_util), "--seed", "0"]
    if hybrid:
        cmd += ["--language-model-only", "--gdn-prefill-backend", "triton",
                "--mamba-cache-mode", "align"]
    return cmd


def _lcp(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.tinymodel probe")
    p.add_argument("--server", action="append", required=True,
                   help="NAME=MODEL_DIR:CUDAGRAPH_MODE")
    p.add_argument("--out", required=True)
    p.add_argument("--residues", default="3,4,5,60")
    p.add_argument("--context", type=int, default=1200)
    p.add_argument("--boot-timeout", type=float, default=240)
    p.add_argument("--gpu-util", type=float, default=0.2)
    p.add_argument("--max-tokens", type=int, default=160)
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    residues = [int(x) for x in a.residues.split(",")]
    t0 = time.time()
    servers = _start_servers(a.server, out, a.gpu_util)
    result: dict = {"servers": []}
    try:
        _wait_ready(servers, t0, a.boot_timeout)
        for s in servers:
            rec = {k: s.get(k) for k in ("name", "model", "mode", "hybrid", "port", "cmd",
                                        "boot_s", "exit")}
            rec["requests"] = []
            result["servers"].append(rec)
            if s.get("boot_s") is not None:
                _probe(s, rec, residues, a, out)
    finally:
        _stop_servers(servers, out)
        result["wall_s"] = round(time.time() - t0, 1)
        (out / "probe.json").write_text(json.dumps(result, indent=2) + "\n")
    _print(result)
    return 0


def _start_servers(specs: list[str], out: Path, gpu_util: float) -> list[dict]:
    env = dict(os.environ, **ENV)
    servers = []
    for i, spec in enumerate(specs):
        name, rest = spec.split("=", 1)
        model, mode = rest.rsplit(":", 1)
        hybrid = json.loads((Path(model) / "config.json").read_text()).get("model_type") == "qwen3_5"
        port = 8100 + i
        cmd = server_cmd(model, port, mode, hybrid, gpu_util)
        logf = open(out / f"vllm_{name}.log", "w")
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        servers.append(dict(name=name, model=model, mode=mode, hybrid=hybrid, port=port,
                            cmd=cmd, proc=proc, started=time.time()))
    return servers


def _wait_ready(servers: list[dict], t0: float, boot_timeout: float) -> None:
    """Each server's ``boot_s`` (None with an ``exit`` where it died or timed out)."""
    import httpx
    # readiness: poll /health, never a fixed sleep
    pending = list(servers)
    while pending and time.time() - t0 < boot_timeout:
        for s in list(pending):
            if s["proc"].poll() is not None:
                s["boot_s"] = None
                s["exit"] = s["proc"].returncode
                pending.remove(s)
                continue
            try:
                r = httpx.get(f"http://127.0.0.1:{s['port']}/health", timeout=2)
                if r.status_code == 200:
                    s["boot_s"] = round(time.time() - s["started"], 1)
                    pending.remove(s)
            except httpx.HTTPError:
                pass
        time.sleep(1)
    for s in pending:
        s["boot_s"] = None
        s["exit"] = "boot timeout"


def _probe(s: dict, rec: dict, residues: list[int], a: argparse.Namespace, out: Path) -> None:
    """Each residue's planned prompt sent twice (cold, then a self-hit) to a ready server;
    its spec-decode and prefix-cache metrics saved."""
    import httpx
    from engine.prompts import ChatTokenizer, plan
    base = f"http://127.0.0.1:{s['port']}"
    ct = ChatTokenizer.from_dir(s["model"])
    cli = httpx.Client(timeout=120)
    for r in residues:
        pl = plan(ct.count_many, [r], context=a.context, modulus=128, seed=100 + r,
                  verify=True)[0]
        tok = cli.post(f"{base}/tokenize", json={"model": "tiny",
                       "messages": list(pl.messages), "add_generation_prompt": True}).json()
        server_len = tok.get("count", len(tok.get("tokens", [])))
        for phase in ("cold", "self_hit"):
            t = time.time()
            resp = cli.post(f"{base}/v1/chat/completions", json={
                "model": "tiny", "messages": list(pl.messages), "temperature": 0,
                "max_tokens": a.max_tokens, "seed": 0}).json()
            dt = time.time() - t
            ch = (resp.get("choices") or [{}])[0]
            content = (ch.get("message") or {}).get("content") or ""
            usage = resp.get("usage") or {}
            det = usage.get("prompt_tokens_details") or {}
            rec["requests"].append(dict(
                residue=r, phase=phase, seed=100 + r, target_len=pl.target_len,
                pad_count=pl.pad_count, server_tokenize_len=server_len,
                prompt_tokens=usage.get("prompt_tokens"),
                cached_tokens=det.get("cached_tokens"),
                completion_tokens=usage.get("completion_tokens"),
                finish_reason=ch.get("finish_reason"), verbatim=content == pl.expected,
                lcp_chars=_lcp(content, pl.expected), expected_chars=len(pl.expected),
                seconds=round(dt, 3), answer=content,
                error=resp.get("error") if "error" in resp else None))
    try:
        (out / f"metrics_{s['name']}.txt").write_text(
            "\n".join(l for l in cli.get(f"{base}/metrics").text.splitlines()
                      if "spec_decode" in l or "prefix_cache" in l))
    except httpx.HTTPError as e:
        (out / f"metrics_{s['name']}.txt").write_text(repr(e))


def _stop_servers(servers: list[dict], out: Path) -> None:
    """SIGTERM to each server's group, SIGKILL after 15 s; the log lines that matter kept."""
    for s in servers:
        try:
            os.killpg(s["proc"].pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + 15
    for s in servers:
        try:
            s["proc"].wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(s["proc"].pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for s in servers:
        lines = (out / f"vllm_{s['name']}.log").read_text(errors="replace").splitlines()
        (out / f"log_{s['name']}.txt").write_text(
            "\n".join(l for l in lines if LOG_PATTERNS.search(l)) + "\n")


def _print(result: dict) -> None:
    for srv in result["servers"]:
        print(srv["name"], srv["mode"], "boot", srv["boot_s"], srv.get("exit"))
        for q in srv["requests"]:
            print(f"  r={q['residue']:>3} {q['phase']:8} len={q['prompt_tokens']} "
                  f"(tok {q['server_tokenize_len']}/{q['target_len']}) cached={q['cached_tokens']} "
                  f"verbatim={q['verbatim']} lcp={q['lcp_chars']}/{q['expected_chars']} "
                  f"fin={q['finish_reason']} ans={q['answer'][:60]!r}")
