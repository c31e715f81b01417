"""Which state makes a reused vLLM server answer differently from a fresh one? (issue 24)

On one GPU, for each probed cell (a configuration and a residue where a fresh server's first
request breaks), boot two servers side by side:
- a **plain** server (no sleep mode): its first cold + self-hit answers are the fresh
  reference of a normal allocator;
- a **probe** server with ``--enable-sleep-mode`` and the worker extension
  ``engine.vllm.state_restore.StateRestore``: its first answers are the fresh reference of
  the sleep-mode allocator; then, per restore method, it serves other prompts of the same
  document (history), resets the prefix cache, returns ONE kind of state to its post-boot
  snapshot (or sleeps level 1 and wakes), and sends the cell's prompt again, cold then
  self-hit, plus the two neighbouring residues cold.
Equivalence is judged as the project judges it: same verdict, and ok answers byte for byte;
a wrong answer's bytes are stale memory and are compared only to say "same wrong answer".

Writes one JSON line per request and a summary table (markdown) to --out.
Usage (on the device, vLLM on PYTHONPATH, repo root as cwd):
    python3 benchmarks/gpu_find_state.py --model engine/tinymodel/weights/hybrid --out DIR
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.prompts import ChatTokenizer, plan  # noqa: E402

# Each method starts from a server healed by a sleep/wake cycle (a zeroing kind that
# broke it must not taint the next), then serves history, resets and restores.
METHODS = ("reset", "kv0", "kvstore0", "mamba0", "builders0", "blocktable0",
           "kvstore0,mamba0,builders0,blocktable0", "sleep", "sleep")
CELLS = (  # name, speculative config, rule residue, document seed
    ("ngram-k2", {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4,
                  "prompt_lookup_min": 2}, 3, 0),
    ("ngram-k4", {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                  "prompt_lookup_min": 2}, 5, 0),
    ("mtp-k3", {"method": "mtp", "num_speculative_tokens": 3}, 4, 0),
)


def server_argv(model: str, port: int, spec: dict, probe: bool) -> list[str]:
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--host", "127.0.0.1", "--port", str(port), "--enable-prefix-caching",
            "--block-size", "128", "--prefix-match-unit", "128",
            "--speculative-config", json.dumps(spec),
            "--compilation-config", '{"cudagraph_mode":"FULL_AND_PIECEWISE"}',
            "--max-model-len", "245760", "--kv-cache-memory-bytes", "5261334937",
            "--enable-prompt-tokens-details", "--seed", "0", "--mamba-cache-mode", "align",
            "--gdn-prefill-backend", "triton", "--language-model-only",
            "--gpu-memory-utilization", "0.07"]
    if probe:
        argv += ["--enable-sleep-mode",
                 "--worker-extension-cls", "engine.vllm.state_restore.StateRestore"]
    return argv


class Server:
    def __init__(self, name: str, argv: list[str], port: int, logdir: Path,
                 env: dict | None = None):
        self.name, self.port = name, port
        env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", **(env or {}))
        self.log = open(logdir / f"{name}.log", "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        self.t0 = time.monotonic()

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited {self.proc.returncode} before /health")
        try:
            return self.http.get("/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def chat(srv: Server, model: str, messages) -> dict:
    t = time.monotonic()
    r = srv.http.post("/v1/chat/completions", json={
        "model": model, "messages": list(messages), "temperature": 0, "max_tokens": 256})
    r.raise_for_status()
    body = r.json()
    usage = body.get("usage") or {}
    return {"text": body["choices"][0]["message"].get("content") or "",
            "prompt_tokens": usage.get("prompt_tokens"),
            "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
            "latency_s": round(time.monotonic() - t, 3)}


def restore(srv: Server, method: str) -> dict:
    t = time.monotonic()
    info: dict = {}
    if method == "sleep":
        srv.http.post("/sleep", params={"level": "1"}).raise_for_status()
        info["sleeping"] = srv.http.get("/is_sleeping").json().get("is_sleeping")
        srv.http.post("/wake_up").raise_for_status()
        info["awake"] = not srv.http.get("/is_sleeping").json().get("is_sleeping")
    srv.http.post("/reset_prefix_cache").raise_for_status()
    if method not in ("reset", "sleep"):
        r = srv.http.post("/collective_rpc", json={"method": "residue_lab_restore",
                                                   "args": [method]})
        r.raise_for_status()
        info["rpc"] = r.json()
    info["s"] = round(time.monotonic() - t, 4)
    return info


def probe_cell(name: str, srv: Server, plain: Server, model: str, plans: dict, rule: int,
               sink) -> None:
    def send(server, label, residue, phase, extra=None):
        p = plans[residue]
        rec = chat(server, model, p.messages)
        rec.update(cell=name, server=server.name, step=label, residue=residue, phase=phase,
                   target_len=p.target_len, ok=rec["text"] == p.expected, **(extra or {}))
        sink.write(json.dumps(rec) + "\n"); sink.flush()
        return rec

    # The snapshot is taken before the first request: "as booted" for every kind.
    snap = srv.http.post("/collective_rpc", json={"method": "residue_lab_snapshot"})
    sink.write(json.dumps({"cell": name, "snapshot": snap.json() if snap.is_success
                           else snap.text}) + "\n")
    for server in (plain, srv):
        send(server, "first", rule, "cold"); send(server, "first", rule, "self-hit")
    history = [rule + 7, rule + 40]
    for i, method in enumerate(METHODS):
        if i:
            sink.write(json.dumps({"cell": name, "heal": restore(srv, "sleep")}) + "\n")
        for h in history:
            send(srv, f"history-{i}", h % 128, "cold"); send(srv, f"history-{i}", h % 128, "self-hit")
        info = restore(srv, method)
        label = f"{i}:{method}"
        send(srv, label, rule, "cold", {"restore": info})
        send(srv, label, rule, "self-hit")
        for n in (rule - 1, rule + 1):
            send(srv, label, n, "cold")
        history = [h + 11 for h in history]


def _mark(rec: dict, first: dict) -> str:
    verdict = "ok" if rec["ok"] else "wrong"
    if rec["text"] == first["text"]:
        return f"{verdict}, = first"
    return f"{verdict}, other bytes"


def summarize(out: Path) -> str:
    """The probe's records as one markdown table per cell: the rule cell's answer after each
    restore method, against the same server's first answer (same bytes or not), and the
    neighbours' verdicts."""
    lines = []
    for path in sorted(out.glob("probe-*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as fh:
            recs = [json.loads(x) for x in fh]
        reqs = [r for r in recs if "step" in r]
        cell = reqs[0]["cell"]
        first = {(r["server"].rsplit("-", 1)[1], r["phase"]): r for r in reqs if r["step"] == "first"}
        rule = reqs[0]["residue"]
        lines += [f"### {cell}, residue {rule} (rule cell), document 0", "",
                  "| server / restore method | cold | self-hit | neighbours cold | restore s |",
                  "|---|---|---|---|---|"]
        for kind in ("plain", "probe"):
            c, h = first[(kind, "cold")], first[(kind, "self-hit")]
            label = "fresh, plain allocator" if kind == "plain" else "fresh, sleep mode"
            lines.append(f"| {label}: first request | {'ok' if c['ok'] else 'wrong'} "
                         f"`{_sha(c['text'])}` | {'ok' if h['ok'] else 'wrong'} `{_sha(h['text'])}` | | |")
        steps = [r["step"] for r in reqs if ":" in r["step"]]
        for step in dict.fromkeys(steps):
            rows = [r for r in reqs if r["step"] == step]
            cold = next(r for r in rows if r["residue"] == rule and r["phase"] == "cold")
            hit = next(r for r in rows if r["residue"] == rule and r["phase"] == "self-hit")
            nb = [r for r in rows if r["residue"] != rule]
            lines.append(f"| {step.split(':', 1)[1]} | {_mark(cold, first[('probe', 'cold')])} | "
                         f"{_mark(hit, first[('probe', 'self-hit')])} | "
                         f"{sum(r['ok'] for r in nb)}/{len(nb)} ok | {cold['restore']['s']} |")
        hist = [r for r in reqs if r["step"].startswith("history")]
        lines += ["", f"History prompts (other residues of the same document): "
                  f"{sum(r['ok'] for r in hist)} of {len(hist)} ok.", ""]
    return "\n".join(lines)


def _sha(text: str) -> str:
    import hashlib
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summarize", type=Path, help="print the table of a finished probe's folder")
    ap.add_argument("--model")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--boot-timeout", type=float, default=420)
    ap.add_argument("--cells", default=",".join(c[0] for c in CELLS))
    args = ap.parse_args()
    if args.summarize:
        print(summarize(args.summarize))
        return 0
    if not (args.model and args.out):
        ap.error("--model and --out are required to run the probe")
    args.out.mkdir(parents=True, exist_ok=True)
    tok = ChatTokenizer.from_dir(args.model)
    cells = [c for c in CELLS if c[0] in args.cells.split(",")]
    servers = {}
    port = 8300
    for name, spec, rule, seed in cells:
        for kind in ("plain", "probe"):
            servers[(name, kind)] = Server(f"{name}-{kind}", server_argv(args.model, port, spec,
                                           kind == "probe"), port, args.out)
            port += 1
    try:
        deadline = time.monotonic() + args.boot_timeout
        pending = set(servers)
        while pending and time.monotonic() < deadline:
            for key in list(pending):
                if servers[key].ready():
                    pending.discard(key)
                    print(f"{key} ready after {time.monotonic() - servers[key].t0:.1f}s", flush=True)
            time.sleep(1)
        if pending:
            print(f"not ready: {sorted(pending)}", flush=True)
            return 3
        def one(cell) -> None:   # cells run side by side, each on its own two servers
            name, spec, rule, seed = cell
            residues = sorted({rule, rule - 1, rule + 1} |
                              {rule + 7 + 11 * i for i in range(len(METHODS))} |
                              {rule + 40 + 11 * i for i in range(len(METHODS))})
            residues = [r % 128 for r in residues]
            ps = plan(tok.count_many, residues, context=1200, modulus=128, seed=seed)
            with open(args.out / f"probe-{name}.jsonl", "w") as sink:
                probe_cell(name, servers[(name, "probe")], servers[(name, "plain")],
                           args.model, {p.residue: p for p in ps}, rule, sink)
            print(f"{name} done", flush=True)

        with ThreadPoolExecutor(len(cells)) as pool:
            for fut in [pool.submit(one, c) for c in cells]:
                fut.result()
    finally:
        for s in servers.values():
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
