"""A small OpenAI-compatible test server whose faults are chosen by the test.

Used by the harness tests through ``--engine cmd``: it answers the copy task correctly
(the first N lines of the document in the prompt), counts templated tokens with a real
tokenizer + chat template, reports ``cached_tokens`` for prompts it has seen before (hits
in whole units of ``--unit``, capped at n-1), and misbehaves on purpose:

  --break-residue R   on a cache hit, a prompt whose templated length ≡ R (mod --unit)
                      gets ``content: null`` (the thread's collapse)
  --crash-residue R   the process dies in the middle of answering that prompt
  --hang-residue R    never answers that prompt (the harness times out)
  --boot-fail MSG     print MSG and exit 1 before listening
  --fail-boot N[,M...] --boot-count-dir D
                      the Nth (and Mth ...) server started with this D (counted by creating D/boot-1,
                      D/boot-2, ... atomically) exits 1 before listening, with a CUDA OOM
                      line (several servers on one GPU); the others boot
  --reply-delay S     sleep S seconds before each chat answer (a slow point)
  --slow-exit S       on SIGTERM, take S seconds to exit (a GPU server freeing memory);
                      the log says "fake engine up at T" and "fake engine gone at T"
  --compile-cache D --cold-boot-s C --warm-boot-s W
                      a cold compile before listening, as vLLM on a cold GPU machine: with
                      no D/warm marker the boot takes C seconds times the number of cold
                      boots running at once (they share the CPU), then writes the marker;
                      with it, W seconds
  --no-tokenize       no /tokenize endpoint (404)

Standard library HTTP server on purpose: it must not share code with the lab engine.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from engine.prompts.templating import ChatTokenizer  # noqa: E402

WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten".split())}


def copy_answer(content: str) -> str:
    m = re.search(r"\b(\d+|" + "|".join(WORDS) + r")\s+lines?\b", content)
    n = int(m.group(1)) if m and m.group(1).isdigit() else WORDS.get(m.group(1), 1) if m else 1
    parts = content.split("\n\n", 1)
    doc = parts[1] if len(parts) > 1 else content
    lines = [ln for ln in doc.split("\n") if ln.strip()]
    return "\n".join(lines[:n])


class State:
    def __init__(self, args):
        self.args = args
        self.tok = ChatTokenizer.from_dir(args.model)
        self.seen: dict[str, int] = {}
        self.drafts = 0
        self.accepted = 0
        self.served = 0      # chat requests answered (the first is a fresh server's cold one)
        self.lock = threading.Lock()


def make_handler(state: State):
    args = state.args

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):  # quiet
            pass

        def _send(self, code: int, body, ctype="application/json"):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n) or b"{}")

        def do_GET(self):
            if self.path == "/health":
                return self._send(200, b"", "text/plain")
            if self.path == "/v1/models":
                return self._send(200, {"object": "list", "data": [
                    {"id": "fake-copy", "object": "model", "max_model_len": 1 << 20}]})
            if self.path == "/version":
                return self._send(200, {"version": "fake-0.1"})
            if self.path == "/metrics":
                text = ("# TYPE vllm:spec_decode_num_drafts counter\n"
                        f'vllm:spec_decode_num_drafts_total{{model_name="fake-copy"}} {state.drafts}\n'
                        "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
                        f'vllm:spec_decode_num_accepted_tokens_total{{model_name="fake-copy"}} {state.accepted}\n')
                return self._send(200, text.encode(), "text/plain; version=0.0.4")
            self._send(404, {"error": {"message": "not found"}})

        def do_POST(self):
            if self.path == "/reset_prefix_cache":
                state.seen.clear()
                return self._send(200, b"", "text/plain")
            if self.path == "/tokenize":
                if args.no_tokenize:
                    return self._send(404, {"error": {"message": "not found"}})
                body = self._body()
                n = state.tok.count(body["messages"])
                return self._send(200, {"count": n, "tokens": [], "max_model_len": 1 << 20})
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": {"message": "not found"}})
            body = self._body()
            msgs = body["messages"]
            text = state.tok.render(msgs)
            n = len(state.tok.encode_text(text))
            residue = n % args.unit
            if args.reply_delay:
                time.sleep(args.reply_delay)
            if residue == args.hang_residue:
                time.sleep(3600)
            if residue == args.crash_residue:
                print(f"FATAL: fake engine core died at templated length {n}", flush=True)
                os._exit(17)
            with state.lock:
                hit = state.seen.get(text)
                cached = 0
                # a hit covers what an earlier prompt shares with this one, in whole units
                for prev, plen in state.seen.items():
                    shared = 0
                    if text.startswith(prev) or prev.startswith(text):
                        shared = min(plen, n)
                    cached = max(cached, min(shared, n - 1) // args.unit * args.unit)
                state.seen[text] = n
            answer = copy_answer(msgs[-1]["content"])
            content = answer
            if hit is not None and residue == args.break_residue:
                content = None
            # the shape of issue 17: only the first request of a fresh server breaks
            first, state.served = state.served == 0, state.served + 1
            if first and residue == args.break_first_cold_residue:
                content = None
            toks = len(state.tok.encode_text(answer)) if content else 0
            with state.lock:
                state.drafts += max(toks // 4, 0)
                state.accepted += max(toks // 4, 0) * 3
            self._send(200, {
                "id": "x", "object": "chat.completion", "model": "fake-copy",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": n, "completion_tokens": toks,
                          "total_tokens": n + toks,
                          "prompt_tokens_details": {"cached_tokens": cached}}})

    return H


def _compile(cache: str, cold_s: float, warm_s: float) -> None:
    """A boot that compiles: slow and slower beside other cold compiles, fast once warm."""
    os.makedirs(cache, exist_ok=True)
    warm = os.path.join(cache, "warm")
    if os.path.exists(warm):
        time.sleep(warm_s)
        return
    mine = os.path.join(cache, f"compiling-{os.getpid()}")
    open(mine, "w").close()
    print("compiling the model's graphs (cold cache)", flush=True)
    try:
        t_end = time.monotonic() + cold_s
        while time.monotonic() < t_end:   # each second of work stretches by the crowd
            crowd = len([f for f in os.listdir(cache) if f.startswith("compiling-")])
            time.sleep(0.05)
            t_end += 0.05 * (crowd - 1)
        open(warm, "w").close()
    finally:
        os.unlink(mine)


def _boot_number(count_dir: str) -> int:
    """This server's 1-based boot number among those counted in ``count_dir``."""
    os.makedirs(count_dir, exist_ok=True)
    n = 1
    while True:
        try:
            os.close(os.open(os.path.join(count_dir, f"boot-{n}"), os.O_CREAT | os.O_EXCL))
            return n
        except FileExistsError:
            n += 1


def _exit_slowly(seconds: float) -> None:
    import signal

    def leave(signum, frame):
        time.sleep(seconds)   # the fake's own exit takes this long (what the test measures)
        print(f"fake engine gone at {time.time():.6f}", flush=True)
        os._exit(0)
    signal.signal(signal.SIGTERM, leave)
    print(f"fake engine up at {time.time():.6f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--unit", type=int, default=128)
    p.add_argument("--break-residue", type=int, default=-1)
    p.add_argument("--crash-residue", type=int, default=-1)
    p.add_argument("--break-first-cold-residue", type=int, default=-1,
                   help="break the answer of the server's first chat request at this residue")
    p.add_argument("--hang-residue", type=int, default=-1)
    p.add_argument("--boot-fail")
    p.add_argument("--no-tokenize", action="store_true")
    p.add_argument("--fail-boot", default=frozenset(),
                   type=lambda v: frozenset(int(x) for x in v.split(",")))
    p.add_argument("--boot-count-dir")
    p.add_argument("--reply-delay", type=float, default=0.0)
    p.add_argument("--compile-cache")
    p.add_argument("--cold-boot-s", type=float, default=0.0)
    p.add_argument("--warm-boot-s", type=float, default=0.0)
    p.add_argument("--slow-exit", type=float, default=0.0)
    args = p.parse_args()
    if args.boot_fail:
        print(f"ValueError: {args.boot_fail}", flush=True)
        sys.exit(1)
    if args.fail_boot and (n := _boot_number(args.boot_count_dir)) in args.fail_boot:
        print(f"torch.OutOfMemoryError: CUDA out of memory (fake: boot {n})", flush=True)
        sys.exit(1)
    if args.compile_cache:
        _compile(args.compile_cache, args.cold_boot_s, args.warm_boot_s)
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(State(args)))
    srv.daemon_threads = True
    if args.slow_exit:
        _exit_slowly(args.slow_exit)
    print(f"fake engine listening on {args.port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
