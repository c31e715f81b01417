"""``/v1/chat/completions``: request validation, the plain JSON answer and the SSE stream.

Mirrors ``vllm/entrypoints/openai/chat_completion/serving.py`` (``OpenAIServingChat``:
``create_chat_completion``, ``chat_completion_full_generator``,
``chat_completion_stream_generator``). Each step is one small function over the app state
(``AppState``, built once by ``server.build_app``) and the parsed request (``ChatParams``).
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

import numpy as np
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse

from .app_state import APIError, AppState
from .engine_core import EngineDeadError
from .tokenizer import IncrementalDetokenizer

__all__ = ["chat_completions"]

MAX_STOP_STRINGS = 16
MAX_TOP_LOGPROBS = 20  # vLLM's default --max-logprobs, OpenAI's limit


@dataclass
class ChatParams:
    """One validated chat request."""

    ids: np.ndarray
    max_tokens: int
    stops: list[str]
    model_name: str
    stream: bool
    include_usage: bool
    created: int
    num_logprobs: int | None = None   # None: no logprobs; N: top-N alternatives per token
    tokens_as_ids: bool = False       # vLLM's return_tokens_as_token_ids: 'token_id:N'
    ignore_eos: bool = False          # vLLM's extra sampling parameter: decode to max_tokens
    skip_special_tokens: bool = True  # vLLM's: special tokens left out of the text
    request_id: str | None = None     # X-Request-Id, else the body's request_id (vLLM's)
    prompt_logprobs: int | None = None  # vLLM's extra parameter: None, or the top N

    @property
    def prompt_len(self) -> int:
        return len(self.ids)

    def find_stop(self, text: str) -> tuple[int, str] | None:
        hits = [(text.find(x), x) for x in self.stops if x in text]
        return min(hits) if hits else None


# -- validation ---------------------------------------------------------------------------
def _max_tokens(st: AppState, data: dict[str, Any], plen: int) -> int:
    limit = st.cfg.max_model_len
    max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    if max_tokens is None:
        max_tokens = limit - plen
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise APIError(400, "'max_tokens' must be a positive integer", param="max_tokens")
    if plen + max_tokens > limit:
        raise APIError(400, f"'max_tokens' is too large: {max_tokens}. This model's maximum "
                            f"context length is {limit} tokens and your request "
                            f"has {plen} input tokens ({max_tokens} > {limit} - "
                            f"{plen}).", param="max_tokens")
    return max_tokens


def _stops(data: dict[str, Any]) -> list[str]:
    stops = data.get("stop") or []
    if isinstance(stops, str):
        stops = [stops]
    if (not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS
            or not all(isinstance(x, str) and x for x in stops)):
        raise APIError(400, "'stop' must be a non-empty string or a list of them", param="stop")
    return stops


def _include_usage(data: dict[str, Any]) -> bool:
    opts = data.get("stream_options")
    return bool(opts.get("include_usage")) if isinstance(opts, dict) else False


def _num_logprobs(data: dict[str, Any]) -> int | None:
    """OpenAI's ``logprobs`` (bool) and ``top_logprobs`` (0..20, needs ``logprobs``)."""
    want, top = data.get("logprobs"), data.get("top_logprobs")
    if want is not None and not isinstance(want, bool):
        raise APIError(400, "'logprobs' must be a boolean", param="logprobs")
    if top is not None:
        if (isinstance(top, bool) or not isinstance(top, int)
                or not 0 <= top <= MAX_TOP_LOGPROBS):
            raise APIError(400, f"'top_logprobs' must be an integer 0..{MAX_TOP_LOGPROBS}",
                           param="top_logprobs")
        if not want:
            raise APIError(400, "when using 'top_logprobs', 'logprobs' must be set to true",
                           param="top_logprobs")
    return (top or 0) if want else None


def _skip_special(data: dict[str, Any]) -> bool:
    v = data.get("skip_special_tokens", True)
    if not isinstance(v, bool):
        raise APIError(400, "'skip_special_tokens' must be a boolean", param="skip_special_tokens")
    return v


def _prompt_logprobs(data: dict[str, Any]) -> int | None:
    """vLLM's ``prompt_logprobs`` (an int, -1: as many as the lab has; not with a stream)."""
    n = data.get("prompt_logprobs")
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < -1:
        raise APIError(400, "'prompt_logprobs' must be an integer >= -1", param="prompt_logprobs")
    if data.get("stream"):
        raise APIError(400, "`prompt_logprobs` are not available when `stream=True`.",
                       param="prompt_logprobs")
    return MAX_TOP_LOGPROBS if n == -1 else n


def parse_chat_request(st: AppState, data: dict[str, Any]) -> ChatParams:
    st.check_model(data)
    if "messages" not in data:
        raise APIError(400, "'messages' is required", param="messages")
    if data.get("n", 1) not in (1, None):
        raise APIError(400, "only n=1 is supported", param="n")
    ids = st.templated_ids(data)
    plen = len(ids)
    if plen >= st.cfg.max_model_len:
        raise APIError(400, f"This model's maximum context length is {st.cfg.max_model_len} "
                            f"tokens. However, your request has {plen} input tokens. Please "
                            f"reduce the length of the input messages.", param="messages")
    return ChatParams(ids=ids, max_tokens=_max_tokens(st, data, plen), stops=_stops(data),
                      model_name=data.get("model") or st.cfg.served_model_name,
                      stream=bool(data.get("stream")), include_usage=_include_usage(data),
                      created=int(time.time()), num_logprobs=_num_logprobs(data),
                      tokens_as_ids=bool(data.get("return_tokens_as_token_ids")),
                      ignore_eos=bool(data.get("ignore_eos")),
                      skip_special_tokens=_skip_special(data),
                      request_id=(str(data["request_id"]) if data.get("request_id") else None),
                      prompt_logprobs=_prompt_logprobs(data))


# -- answers ------------------------------------------------------------------------------
def usage(st: AppState, p: ChatParams, req) -> dict[str, Any]:
    n_out = len(req.output_token_ids)
    u: dict[str, Any] = {"prompt_tokens": p.prompt_len, "completion_tokens": n_out,
                         "total_tokens": p.prompt_len + n_out, "prompt_tokens_details": None}
    if st.cfg.enable_prompt_tokens_details:
        u["prompt_tokens_details"] = {"cached_tokens": max(req.num_cached_tokens, 0)}
    return u


def _token_entry(st: AppState, p: ChatParams, tok: int, logprob: float) -> dict[str, Any]:
    text = (f"token_id:{tok}" if p.tokens_as_ids
            else st.tokenizer.decode([tok], skip_special_tokens=False))
    return {"token": text, "logprob": max(logprob, -9999.0),
            "bytes": list(text.encode("utf-8", errors="replace"))}


def logprobs_content(st: AppState, p: ChatParams, req, first: int, count: int
                     ) -> list[dict[str, Any]]:
    """OpenAI ``logprobs.content`` entries for output tokens [first, first + count)."""
    out = []
    for i in range(first, first + count):
        tok = req.output_token_ids[i]
        ranked = req.output_logprobs[i]
        entry = _token_entry(st, p, tok, dict(ranked)[tok])
        entry["top_logprobs"] = [_token_entry(st, p, t, lp) for t, lp in ranked[:p.num_logprobs]]
        out.append(entry)
    return out


async def full_response(st: AppState, p: ChatParams, gen) -> Response:
    """The whole answer as one ``chat.completion`` object."""
    out_ids: list[int] = []
    reason, last = None, None
    async for new, reason, req in gen:
        out_ids.extend(new)
        last = req
        if p.stops and p.find_stop(st.tokenizer.decode(out_ids, p.skip_special_tokens)):
            reason = "stop"
            await gen.aclose()  # aborts the request
            break
    text = st.tokenizer.decode(out_ids, p.skip_special_tokens)
    logprobs = None
    if p.num_logprobs is not None and last is not None:
        logprobs = {"content": logprobs_content(st, p, last, 0, len(out_ids))}
    stop_reason = None
    if p.stops and (hit := p.find_stop(text)):
        text, stop_reason = text[:hit[0]], hit[1]
    extra = {}
    if p.prompt_logprobs is not None:
        extra["prompt_logprobs"] = _prompt_entries(st, last)
    return JSONResponse({**extra,
        "id": last.request_id if last else "chatcmpl-none", "object": "chat.completion",
        "created": p.created, "model": p.model_name,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                             "tool_calls": []},
                     "logprobs": logprobs, "finish_reason": reason,
                     "stop_reason": stop_reason}],
        "usage": usage(st, p, last), "system_fingerprint": None})


def _prompt_entries(st: AppState, req) -> list | None:
    """vLLM's shape: None for the first token, then {token id: {logprob, rank,
    decoded_token}} with the prompt token and the top N."""
    if req is None or req.prompt_logprobs is None:
        return None
    out: list = [None]
    for row in req.prompt_logprobs[1:]:
        (tok, lp), ranked = row[0], row[1:]
        ranks = {t: i + 1 for i, (t, _) in enumerate(ranked)}
        entry = {}
        for t, v in [(tok, lp)] + ranked:
            entry.setdefault(str(t), {"logprob": max(v, -9999.0),
                                      "rank": ranks.get(t, len(ranked) + 1),
                                      "decoded_token": st.tokenizer.decode(
                                          [t], skip_special_tokens=False)})
        out.append(entry)
    return out


def _sse_chunk(p: ChatParams, rid: str | None, delta: dict[str, Any], reason: str | None,
               u: dict[str, Any] | None = None, logprobs: list | None = None) -> str:
    body: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk",
                            "created": p.created, "model": p.model_name,
                            "choices": [{"index": 0, "delta": delta,
                                         "logprobs": ({"content": logprobs}
                                                      if logprobs is not None else None),
                                         "finish_reason": reason}]}
    if u is not None:
        body["choices"] = []
        body["usage"] = u
    return f"data: {json.dumps(body)}\n\n"


class _StreamText:
    """Turns new token ids into text deltas; with stop strings, holds back what could be
    the start of one."""

    def __init__(self, st: AppState, p: ChatParams) -> None:
        self.st, self.p = st, p
        self.detok = IncrementalDetokenizer(st.tokenizer, p.skip_special_tokens)
        self.out_ids: list[int] = []
        self.sent = 0
        self.hold = max((len(x) for x in p.stops), default=1) - 1

    def push(self, new: list[int], reason: str | None) -> tuple[str, str | None]:
        if not self.p.stops:
            return self.detok.push(new), reason
        self.out_ids.extend(new)
        text = self.st.tokenizer.decode(self.out_ids, self.p.skip_special_tokens).rstrip("\ufffd")
        hit = self.p.find_stop(text)
        if hit:
            text, reason = text[:hit[0]], "stop"
        end = len(text) if reason else max(self.sent, len(text) - self.hold)
        delta, self.sent = text[self.sent:end], max(self.sent, end)
        return delta, reason


async def _chain(first, rest):
    yield first
    async for item in rest:
        yield item


async def sse_events(st: AppState, p: ChatParams, primed, gen) -> AsyncIterator[str]:
    text = _StreamText(st, p)
    rid = None
    n_out = 0  # output tokens streamed so far
    try:
        first = True
        async for new, reason, req in _chain(primed, gen):
            rid = req.request_id
            if first:
                yield _sse_chunk(p, rid, {"role": "assistant", "content": ""}, None)
                first = False
            delta, reason = text.push(new, reason)
            lps = None
            if p.num_logprobs is not None and new:
                lps = logprobs_content(st, p, req, n_out, len(new))
            n_out += len(new)
            if delta or reason or lps:
                yield _sse_chunk(p, rid, {"content": delta} if delta else {}, reason,
                                 logprobs=lps)
            if reason and p.include_usage:
                yield _sse_chunk(p, rid, {}, None, usage(st, p, req))
            if reason:
                break
    except EngineDeadError as e:
        err = {"error": {"message": str(e), "type": "InternalServerError",
                         "param": None, "code": 500}}
        yield f"data: {json.dumps(err)}\n\n"
    finally:
        await gen.aclose()  # a stop string or a hang-up aborts the request
    yield "data: [DONE]\n\n"


async def chat_completions(st: AppState, request: HTTPRequest) -> Response:
    st.check_auth(request)
    p = parse_chat_request(st, await st.read_json(request))
    if st.engine.dead is not None:
        raise EngineDeadError()
    rid = st.engine.request_id(request.headers.get("x-request-id") or p.request_id)
    gen = st.engine.generate(p.ids, p.max_tokens, p.num_logprobs, p.ignore_eos,
                             rid, p.prompt_logprobs)
    return await _cancelled_on_disconnect(request, _answer(st, p, gen, request),
                                          lambda: st.engine.core.abort(rid))


async def _answer(st: AppState, p: ChatParams, gen, request: HTTPRequest) -> Response:
    if not p.stream:
        return await full_response(st, p, gen)
    # Run the first step before answering 200, so an engine that dies on this request
    # still answers 500 rather than a 200 stream with an error in it.
    primed = await gen.__anext__()
    return AbortingStream(_until_disconnect(request, sse_events(st, p, primed, gen)),
                          media_type="text/event-stream")


async def _cancelled_on_disconnect(request: HTTPRequest, answer, abort) -> Response:
    """vLLM's ``entrypoints/utils.py`` ``with_cancellation``: the answer races the client's
    ``http.disconnect``; a client that hangs up (mid-prefill too, before any token) cancels
    it, and the cancelled generator aborts the request in the engine (blocks freed, the
    ``aborted`` trace line, ``finished_reason="abort"``). The engine steps one at a time
    with the event loop in between, and the watcher aborts the engine request as soon as it
    sees the hang-up (as vLLM's AsyncLLM.abort on the API side), so the abort lands within
    a step or two of the disconnect, not after the cancellation has unwound."""
    task = asyncio.ensure_future(answer)
    watcher = asyncio.ensure_future(_disconnected(request, abort))
    done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        watcher.cancel()
        return task.result()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    return Response(status_code=499)   # nobody reads it: the client is gone


async def _disconnected(request: HTTPRequest, abort) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    abort()


class AbortingStream(StreamingResponse):
    """A stream that closes its body, and so aborts its request, however the response
    ends. When the client hangs up, Starlette cancels the streaming task; cancelled while
    it waits in ``send`` (between two chunks), the body generator is left suspended at its
    ``yield``, closed only when the garbage collector reaches it, and the engine decodes
    the request on meanwhile (seen: a client's stream still running 30 s after it closed,
    tests/harness/test_live_traffic.py)."""

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()


async def _until_disconnect(request: HTTPRequest, events) -> AsyncIterator[str]:
    """Stop streaming (and so abort the request) once the client hung up: uvicorn drops
    writes to a closed connection without an error, so the stream would otherwise run to
    max_tokens. vLLM's server does the same (``entrypoints/utils.py`` ``with_cancellation``
    and ``is_disconnected`` checks in its stream generators)."""
    try:
        async for chunk in events:
            if await request.is_disconnected():
                break
            yield chunk
    finally:
        await events.aclose()
