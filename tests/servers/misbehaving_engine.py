"""An OpenAI-compatible test server that misbehaves in one chosen way (not the lab, not
the fake engine: it shares only the fake engine's copy answer and tokenizer).

    --misbehave NAME   what goes wrong (MISBEHAVIOURS below; "none" answers correctly)
    --at-residue R     only prompts whose templated length is R mod --unit (default: all)
    --only-hit         only requests that hit the cache (the cold answer stays correct)

It answers correctly otherwise, reports ``cached_tokens`` for prompts it has seen (whole
``--unit`` units, at most n - 1) and gives OpenAI ``logprobs`` when asked (top-1 beats
top-2 by ``--margin`` nats, one token per word). Its ``/metrics`` counts its own chat
requests under vLLM's names (running, waiting, finished), as a vLLM server's does, so
a ``--url`` sweep can show that each phase ran alone. Standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(__file__))
import fake_engine  # noqa: E402

KV_MESSAGE = ("ValueError: To serve at least one request with the models's max seq len "
              "(245760), (4.69 GiB KV cache is needed, which is larger than the available KV "
              "cache memory (0.50 GiB). Based on the available memory, the estimated maximum "
              "model length is 26000. Try increasing `gpu_memory_utilization` or decreasing "
              "`max_model_len` when initializing the engine.")
JSON = "application/json"
REFUSAL = "I'm sorry, but I can't help with reproducing that document."


def one_word(text: str) -> str:
    words = text.split(" ")
    words[3] = "zebra"
    return " ".join(words)


# name -> what happens to (answer) for text changes; the others are handled in the handler
TEXT = {
    "none": lambda a: a, "empty": lambda a: "", "one-char": lambda a: a[:1],
    "cut2": lambda a: a[:2], "fragment13": lambda a: " first frost.",
    "repetition": lambda a: (a[:30] + " ") * 20, "one-word": one_word,
    "refusal": lambda a: REFUSAL, "trailing": lambda a: a + "\n\nI hope this helps!",
}
OTHER = ("null", "wrong-prompt-tokens", "no-cached", "lying-cached", "length", "http500",
         "http429", "malformed-json", "truncated-sse", "stall", "die", "dead-engine-health",
         "kv-boot")
MISBEHAVIOURS = tuple(TEXT) + OTHER


def chat_reply(state, args, body: dict) -> tuple[str, int, object, str]:
    """What the server does with one chat request: ``(action, status, body, content
    type)``. ``action`` is ``send`` (answer with the rest), or ``stall`` / ``die`` / ``dead``
    (hang, exit the process, or mark the engine dead and answer 500), which only a real
    process can carry out. Shared by the HTTP handler and the in-process tests'
    ``httpx.MockTransport``, so both see the same bytes."""
    msgs = body["messages"]
    text = state.tok.render(msgs)
    n = len(state.tok.encode_text(text))
    with state.lock:
        cached = 0
        for prev, plen in state.seen.items():
            if text.startswith(prev) or prev.startswith(text):
                cached = max(cached, min(plen, n - 1) // args.unit * args.unit)
        state.seen[text] = n
    answer = fake_engine.copy_answer(msgs[-1]["content"])
    hit = cached > 0
    armed = (args.at_residue < 0 or n % args.unit == args.at_residue) and (
        hit or not args.only_hit)
    how = args.misbehave if armed else "none"
    if how in ("stall", "die"):
        return how, 0, b"", ""
    if how == "dead-engine-health":
        return "dead", 500, {"error": {"message": "EngineDeadError: engine core died"}}, JSON
    if how in ("http500", "http429"):
        code = 500 if how == "http500" else 429
        return "send", code, {"error": {"message": f"hostile {code}"}}, JSON
    if how == "malformed-json":
        return "send", 200, b'{"choices": [{"message": {"content": "Ne', JSON
    if how == "truncated-sse":
        return ("send", 200, b'data: {"choices":[{"delta":{"content":"Ne"}}]}\n\n',
                "text/event-stream")
    content = None if how == "null" else TEXT.get(how, TEXT["none"])(answer)
    finish = "stop"
    if how == "length":
        content, finish = answer[: len(answer) // 2], "length"
    usage = {"prompt_tokens": n + 1 if how == "wrong-prompt-tokens" else n,
             "completion_tokens": len((content or "").split()),
             "prompt_tokens_details": {"cached_tokens": cached}}
    if how == "no-cached":
        usage.pop("prompt_tokens_details")
    if how == "lying-cached":
        usage["prompt_tokens_details"] = {"cached_tokens": n - 1}
    choice = {"index": 0, "finish_reason": finish,
              "message": {"role": "assistant", "content": content}}
    if body.get("logprobs"):
        choice["logprobs"] = {"content": logprobs(content or "", args.margin,
                                                  int(body.get("top_logprobs") or 1))}
    return "send", 200, {"id": "x", "object": "chat.completion", "model": "hostile",
                         "choices": [choice], "usage": usage}, JSON


def encode(body) -> bytes:
    """A reply body as the server sends it: bytes as they are, anything else as JSON."""
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def metrics_text(chats: dict) -> str:
    """vLLM's gauges of what the scheduler holds and its counter of finished requests."""
    return ("# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="hostile",engine="0"}} {chats["running"]}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{model_name="hostile",engine="0"} 0\n'
            "# TYPE vllm:request_success counter\n"
            'vllm:request_success_total{model_name="hostile",engine="0",finished_reason="stop"} '
            f'{chats["finished"]}\n')


def make_handler(state, args):
    dead = threading.Event()
    lock = threading.Lock()
    chats = {"running": 0, "finished": 0}   # this server's chat requests, for /metrics

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            pass

        def _send(self, code: int, body, ctype=JSON):
            data = encode(body)
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":  # 200 even after the engine died (vllm#21443)
                return self._send(200, b"", "text/plain")
            if self.path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": "hostile"}]})
            if self.path == "/metrics":
                with lock:
                    text = metrics_text(chats)
                return self._send(200, text.encode(), "text/plain; version=0.0.4")
            self._send(404, {"error": {"message": "not found"}})

        def do_POST(self):
            n_body = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n_body) or b"{}")
            if self.path == "/tokenize":
                return self._send(200, {"count": state.tok.count(body["messages"])})
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": {"message": "not found"}})
            if dead.is_set():
                return self._send(500, {"error": {"message": "EngineDeadError: engine core died"}})
            with lock:
                chats["running"] += 1
            try:
                action, code, reply, ctype = chat_reply(state, args, body)
                if action == "stall":
                    time.sleep(3600)
                if action == "die":
                    print("FATAL: hostile engine died mid-request", flush=True)
                    os._exit(17)
                if action == "dead":
                    dead.set()
            finally:
                with lock:   # finished before the answer is sent, as vLLM's gauges are
                    chats["running"] -= 1
                    chats["finished"] += 1
            self._send(code, reply, ctype)

    return H


def logprobs(text: str, margin: float, top: int) -> list[dict]:
    """One entry per space-led word; the runner-up is 'zz' at ``margin`` nats below."""
    pieces, out = [], []
    for i, w in enumerate(text.split(" ")):
        pieces.append(w if i == 0 else " " + w)
    for p in pieces:
        if not p:
            continue
        alts = [{"token": p, "logprob": -0.01}, {"token": " zz", "logprob": -0.01 - margin}]
        out.append({"token": p, "logprob": -0.01, "top_logprobs": alts[:max(top, 1)]})
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--unit", type=int, default=128)
    p.add_argument("--misbehave", choices=MISBEHAVIOURS, default="none")
    p.add_argument("--at-residue", type=int, default=-1)
    p.add_argument("--only-hit", action="store_true")
    p.add_argument("--margin", type=float, default=4.0)
    args = p.parse_args()
    if args.misbehave == "kv-boot":
        print(KV_MESSAGE, flush=True)
        sys.exit(1)
    state = fake_engine.State(argparse.Namespace(model=args.model))
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(state, args))
    srv.daemon_threads = True
    print(f"hostile engine listening on {args.port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
