"""A CPU stand-in for ``python -m sglang.launch_server`` with SGLang 0.5.12's endpoint shapes
(read from its ``entrypoints/http_server.py`` and ``entrypoints/openai/``): ``/health``
503 while ``Starting`` then 200, ``/server_info`` and ``/get_server_info`` (the arguments as
a dict, the scheduler's pool size, ``internal_states``, ``version``), ``/flush_cache``,
``/tokenize`` and ``/v1/tokenize`` (``tokens``, ``count``, ``max_model_len``),
``/v1/models``, ``/v1/chat/completions`` whose usage has ``prompt_tokens_details`` only
when ``--enable-cache-report`` is on and something was cached, ``/metrics`` with
``sglang:`` names only with ``--enable-metrics``; no ``/version``, no
``/reset_prefix_cache``. Its arguments are SGLang's spellings; an unknown one fails the
boot as SGLang's parser would. It answers the copy task; hits are whole pages of the
longest shared token prefix, capped at n - 1 (``Req.init_next_round_input``).

A fault chosen by the test through the environment: ``FAKE_SGLANG_BREAK_RESIDUE=R``: a
hit whose prompt length ≡ R (mod the page size) answers ``content: null``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
sys.path.insert(0, ROOT)
from engine.prompts.templating import ChatTokenizer  # noqa: E402
from tests.servers.fake_engine import copy_answer  # noqa: E402

from sglang import __version__  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sglang serve")
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--served-model-name")
    p.add_argument("--page-size", type=int)
    p.add_argument("--context-length", type=int)
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--random-seed", type=int)
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-draft-model-path")
    p.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1)
    for switch in ("--disable-radix-cache", "--enable-cache-report", "--enable-metrics",
                   "--disable-cuda-graph", "--disable-piecewise-cuda-graph"):
        p.add_argument(switch, action="store_true")
    return p.parse_args()


class State:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.page = args.page_size or 1   # what the scheduler resolves None to
        self.ctx = args.context_length or 32768
        self.name = args.served_model_name or args.model_path
        self.status = "Starting"
        self.tok: ChatTokenizer | None = None
        self.tree: list[list[int]] = []    # prompts cached (the radix tree, flattened)
        self.cached_total = self.prompt_total = self.requests = 0
        self.lock = threading.Lock()

    def warm_up(self) -> None:
        """What SGLang does before /health says 200: load, then one warm-up request."""
        self.tok = ChatTokenizer.from_dir(self.args.model_path)
        self.tok.count([{"role": "user", "content": "warm up"}])
        self.status = "Up"

    def server_args(self) -> dict:
        a = vars(self.args).copy()
        a["tp_size"] = a.pop("tensor_parallel_size")
        return a

    def server_info(self) -> dict:
        scheduler = {**self.server_args(), "page_size": self.page, "context_length": self.ctx,
                     "memory_usage": {"weight": 0.01, "kvcache": 0.02, "token_capacity": 65536,
                                      "graph": 0.0},
                     "effective_max_running_requests_per_dp": 48}
        return {**self.server_args(), "status": "ready", "max_total_num_tokens": 65536,
                "max_req_input_len": self.ctx - 1, "internal_states": [scheduler],
                "version": __version__}

    def hit(self, ids: list[int]) -> int:
        """Whole pages of the longest prefix shared with a cached prompt, at most n - 1."""
        if self.args.disable_radix_cache:
            return 0
        best = 0
        for prev in self.tree:
            shared = 0
            for a, b in zip(prev, ids[:len(ids) - 1]):
                if a != b:
                    break
                shared += 1
            best = max(best, shared)
        return best // self.page * self.page


def chat_answer(state: State, body: dict) -> dict:
    ids = state.tok.encode_text(state.tok.render(body["messages"]))
    n = len(ids)
    with state.lock:
        cached = state.hit(ids)
        if not state.args.disable_radix_cache:
            state.tree.append(ids)
        state.cached_total += cached
        state.prompt_total += n
        state.requests += 1
    answer = copy_answer(body["messages"][-1]["content"])
    broken = os.environ.get("FAKE_SGLANG_BREAK_RESIDUE")
    content = None if broken and cached and n % state.page == int(broken) else answer
    toks = len(state.tok.encode_text(answer)) if content else 0
    details = {"cached_tokens": cached} if state.args.enable_cache_report and cached else None
    return {"id": f"{state.requests:032x}", "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", state.name),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content,
                                                 "reasoning_content": None,
                                                 "tool_calls": None},
                         "logprobs": None, "finish_reason": "stop", "matched_stop": None}],
            "usage": {"prompt_tokens": n, "total_tokens": n + toks, "completion_tokens": toks,
                      "prompt_tokens_details": details, "reasoning_tokens": 0},
            "metadata": {"weight_version": "default"}}


def metrics(state: State) -> bytes:
    labels = f'model_name="{state.name}",engine_type="unified",tp_rank="0",pp_rank="0"'
    rows = [("num_running_reqs", "gauge", 0), ("num_queue_reqs", "gauge", 0),
            ("cached_tokens_total", "counter", state.cached_total),
            ("prompt_tokens_total", "counter", state.prompt_total)]
    out = []
    for name, kind, value in rows:
        family = name.removesuffix("_total")
        out += [f"# TYPE sglang:{family} {kind}", f"sglang:{name}{{{labels}}} {float(value)}"]
    return ("\n".join(out) + "\n").encode()


def make_handler(state: State):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            pass

        def _send(self, code: int, body, ctype: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict:
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))
                              or b"{}")

        def _flush(self) -> None:
            with state.lock:
                state.tree.clear()
            self._send(200, b"Cache flushed.\nPlease check backend logs for more details. "
                       b"(When there are running or waiting requests, the operation will "
                       b"not be performed.)\n", "text/plain")

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                return self._send(200 if state.status == "Up" else 503, b"", "text/plain")
            if path in ("/server_info", "/get_server_info"):
                return self._send(200, state.server_info())
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [
                    {"id": state.name, "object": "model", "created": int(time.time()),
                     "owned_by": "sglang", "root": state.name, "max_model_len": state.ctx}]})
            if path == "/metrics" and state.args.enable_metrics:
                return self._send(200, metrics(state), "text/plain; version=0.0.4")
            if path == "/flush_cache":
                return self._flush()
            self._send(404, {"detail": "Not Found"})

        def do_POST(self):
            if self.path == "/flush_cache":
                return self._flush()
            if self.path in ("/tokenize", "/v1/tokenize"):
                ids = state.tok.encode_text(state.tok.render(self._body()["messages"]))
                return self._send(200, {"tokens": ids, "count": len(ids),
                                        "max_model_len": state.ctx})
            if self.path == "/v1/chat/completions":
                return self._send(200, chat_answer(state, self._body()))
            self._send(404, {"detail": "Not Found"})

    return H


def main() -> None:
    state = State(parse())
    srv = ThreadingHTTPServer((state.args.host, state.args.port), make_handler(state))
    srv.daemon_threads = True
    threading.Thread(target=state.warm_up, daemon=True).start()
    print(f"fake sglang {__version__} listening on {state.args.port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
