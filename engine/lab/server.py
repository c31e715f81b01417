"""OpenAI-compatible HTTP front (Starlette app served by uvicorn).

Mirrors ``vllm/entrypoints/openai/api_server.py`` and ``serving_chat.py``:
``/health``, ``/v1/models``, ``/version``, ``/v1/chat/completions`` (plain and SSE
streamed, ``usage.prompt_tokens_details.cached_tokens`` with
``--enable-prompt-tokens-details``), ``/tokenize`` / ``/detokenize``, ``/metrics``,
``/reset_prefix_cache``. ``--api-key`` guards ``/v1/*`` as in vLLM. Every bad request
gets an OpenAI-style JSON error with a 4xx status; an engine failure gets a 500; nothing
drops the connection.
"""
from __future__ import annotations

import json
import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .config import VERSION, LabConfig
from .engine_core import AsyncEngine, EngineDeadError
from .tokenizer import ChatFormatError, IncrementalDetokenizer, LabTokenizer


class APIError(Exception):
    def __init__(self, status: int, message: str, type_: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param


def error_response(status: int, message: str, type_: str = "BadRequestError",
                   param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": param,
                                   "code": status}}, status_code=status)


async def _chain(first, rest):
    yield first
    async for item in rest:
        yield item


def build_app(cfg: LabConfig, engine: AsyncEngine, tokenizer: LabTokenizer) -> Starlette:
    served = cfg.served_model_name
    accepted_names = {served, cfg.model, *cfg.served_model_aliases}

    def check_auth(request: HTTPRequest) -> None:
        if cfg.api_key and request.headers.get("authorization") != f"Bearer {cfg.api_key}":
            raise APIError(401, "Unauthorized: missing or wrong API key", "AuthenticationError")

    async def read_json(request: HTTPRequest) -> dict[str, Any]:
        body = await request.body()
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise APIError(400, f"request body is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise APIError(400, "request body must be a JSON object")
        return data

    def check_model(data: dict[str, Any]) -> None:
        m = data.get("model")
        if m is not None and m not in accepted_names:
            raise APIError(404, f"The model `{m}` does not exist.", "NotFoundError", "model")

    def templated_ids(data: dict[str, Any]):
        try:
            text = tokenizer.apply_chat_template(
                data.get("messages"), add_generation_prompt=bool(data.get("add_generation_prompt", True)))
        except ChatFormatError as e:
            raise APIError(400, str(e), param="messages") from None
        except Exception as e:  # template errors
            raise APIError(400, f"chat template failed: {e}", param="messages") from None
        return tokenizer.encode(text)

    # -- endpoints ------------------------------------------------------------------------
    async def health(request: HTTPRequest) -> Response:
        if engine.dead is not None:
            return error_response(503, "EngineCore is dead", "ServiceUnavailableError")
        return Response(status_code=200)

    async def models(request: HTTPRequest) -> Response:
        check_auth(request)
        return JSONResponse({"object": "list", "data": [{
            "id": served, "object": "model", "created": int(started), "owned_by": "residue-lab",
            "root": cfg.model, "parent": None, "max_model_len": cfg.max_model_len,
            "permission": []}]})

    async def version(request: HTTPRequest) -> Response:
        return JSONResponse({"version": VERSION, "engine": "lab",
                             "effective_config": cfg.effective(),
                             "patches": cfg.patch_status()})

    async def tokenize(request: HTTPRequest) -> Response:
        data = await read_json(request)
        check_model(data)
        if "messages" in data:
            ids = templated_ids(data)
        elif isinstance(data.get("prompt"), str):
            ids = tokenizer.encode(data["prompt"])
        else:
            raise APIError(400, "give either 'prompt' (a string) or 'messages'")
        out = {"count": int(len(ids)), "max_model_len": cfg.max_model_len,
               "tokens": [int(i) for i in ids], "token_strs": None}
        if data.get("return_token_strs"):
            out["token_strs"] = [tokenizer.id_to_token(i) for i in ids]
        return JSONResponse(out)

    async def detokenize(request: HTTPRequest) -> Response:
        data = await read_json(request)
        toks = data.get("tokens")
        if not isinstance(toks, list) or not all(isinstance(t, int) for t in toks):
            raise APIError(400, "'tokens' must be a list of integers", param="tokens")
        if any(t < 0 or t >= tokenizer.vocab_size for t in toks):
            raise APIError(400, "token id out of range", param="tokens")
        return JSONResponse({"prompt": tokenizer.decode(toks, skip_special_tokens=False)})

    async def metrics(request: HTTPRequest) -> Response:
        return Response(engine.core.metrics.exposition(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    async def reset_prefix_cache(request: HTTPRequest) -> Response:
        if engine.dead is not None:
            raise APIError(500, "EngineCore is dead", "InternalServerError")
        engine.core.reset_prefix_cache()
        return Response(status_code=200)

    async def chat(request: HTTPRequest) -> Response:
        check_auth(request)
        data = await read_json(request)
        check_model(data)
        if "messages" not in data:
            raise APIError(400, "'messages' is required", param="messages")
        n = data.get("n", 1)
        if n not in (1, None):
            raise APIError(400, "only n=1 is supported", param="n")
        ids = templated_ids(data)
        plen = len(ids)
        if plen >= cfg.max_model_len:
            raise APIError(400, f"This model's maximum context length is {cfg.max_model_len} "
                                f"tokens. However, your request has {plen} input tokens. Please "
                                f"reduce the length of the input messages.", param="messages")
        max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
        if max_tokens is None:
            max_tokens = cfg.max_model_len - plen
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise APIError(400, "'max_tokens' must be a positive integer", param="max_tokens")
        if plen + max_tokens > cfg.max_model_len:
            raise APIError(400, f"'max_tokens' is too large: {max_tokens}. This model's maximum "
                                f"context length is {cfg.max_model_len} tokens and your request "
                                f"has {plen} input tokens ({max_tokens} > {cfg.max_model_len} - "
                                f"{plen}).", param="max_tokens")
        stops = data.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        if (not isinstance(stops, list) or len(stops) > 16
                or not all(isinstance(x, str) and x for x in stops)):
            raise APIError(400, "'stop' must be a non-empty string or a list of them",
                           param="stop")
        if engine.dead is not None:
            raise EngineDeadError()
        created = int(time.time())
        model_name = data.get("model") or served
        stream = bool(data.get("stream"))
        include_usage = bool((data.get("stream_options") or {}).get("include_usage")) \
            if isinstance(data.get("stream_options"), dict) else False
        gen = engine.generate(ids, max_tokens)

        def usage(req) -> dict[str, Any]:
            u: dict[str, Any] = {"prompt_tokens": plen,
                                 "completion_tokens": len(req.output_token_ids),
                                 "total_tokens": plen + len(req.output_token_ids)}
            if cfg.enable_prompt_tokens_details:
                u["prompt_tokens_details"] = {"cached_tokens": max(req.num_cached_tokens, 0)}
            else:
                u["prompt_tokens_details"] = None
            return u

        def find_stop(text: str) -> tuple[int, str] | None:
            hits = [(text.find(x), x) for x in stops if x in text]
            return min(hits) if hits else None

        stop_reason = None
        if not stream:
            out_ids: list[int] = []
            reason, last = None, None
            async for new, reason, req in gen:
                out_ids.extend(new)
                last = req
                if stops and find_stop(tokenizer.decode(out_ids)):
                    reason = "stop"
                    await gen.aclose()  # aborts the request
                    break
            text = tokenizer.decode(out_ids)
            if stops and (hit := find_stop(text)):
                text, stop_reason = text[:hit[0]], hit[1]
            return JSONResponse({
                "id": last.request_id if last else "chatcmpl-none", "object": "chat.completion",
                "created": created, "model": model_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                                     "tool_calls": []},
                             "logprobs": None, "finish_reason": reason,
                             "stop_reason": stop_reason}],
                "usage": usage(last), "system_fingerprint": None})

        async def sse():
            detok = IncrementalDetokenizer(tokenizer)
            rid = None

            def chunk(delta: dict[str, Any], reason: str | None, u=None) -> str:
                body: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk",
                                        "created": created, "model": model_name,
                                        "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                     "finish_reason": reason}]}
                if u is not None:
                    body["choices"] = []
                    body["usage"] = u
                return f"data: {json.dumps(body)}\n\n"

            out_ids: list[int] = []
            sent = 0
            hold = max((len(x) for x in stops), default=1) - 1
            try:
                first = True
                async for new, reason, req in _chain(primed, gen):
                    rid = req.request_id
                    if first:
                        yield chunk({"role": "assistant", "content": ""}, None)
                        first = False
                    if stops:  # hold back what could be the start of a stop string
                        out_ids.extend(new)
                        text = tokenizer.decode(out_ids).rstrip("\ufffd")
                        hit = find_stop(text)
                        if hit:
                            text, reason = text[:hit[0]], "stop"
                        end = len(text) if reason else max(sent, len(text) - hold)
                        delta, sent = text[sent:end], max(sent, end)
                    else:
                        delta = detok.push(new)
                    if delta or reason:
                        yield chunk({"content": delta} if delta else {}, reason)
                    if reason and include_usage:
                        yield chunk({}, None, usage(req))
                    if reason:
                        break
            except EngineDeadError as e:
                err = {"error": {"message": str(e), "type": "InternalServerError",
                                 "param": None, "code": 500}}
                yield f"data: {json.dumps(err)}\n\n"
            finally:
                await gen.aclose()  # a stop string or a hang-up aborts the request
            yield "data: [DONE]\n\n"

        # Run the first step before answering 200, so an engine that dies on this request
        # still answers 500 rather than a 200 stream with an error in it.
        primed = await gen.__anext__()
        return StreamingResponse(sse(), media_type="text/event-stream")

    # -- error plumbing -------------------------------------------------------------------
    def wrap(fn):
        async def handler(request: HTTPRequest) -> Response:
            try:
                return await fn(request)
            except APIError as e:
                return error_response(e.status, e.message, e.type, e.param)
            except EngineDeadError as e:
                return error_response(500, str(e), "InternalServerError")
            except Exception as e:  # never drop the connection
                return error_response(500, f"internal error: {type(e).__name__}: {e}",
                                      "InternalServerError")
        return handler

    async def http_error(request: HTTPRequest, exc: HTTPException) -> Response:
        return error_response(exc.status_code, str(exc.detail),
                              "NotFoundError" if exc.status_code == 404 else "BadRequestError")

    started = time.time()
    routes = [
        Route("/health", wrap(health), methods=["GET"]),
        Route("/ping", wrap(health), methods=["GET", "POST"]),
        Route("/v1/models", wrap(models), methods=["GET"]),
        Route("/version", wrap(version), methods=["GET"]),
        Route("/tokenize", wrap(tokenize), methods=["POST"]),
        Route("/detokenize", wrap(detokenize), methods=["POST"]),
        Route("/metrics", wrap(metrics), methods=["GET"]),
        Route("/reset_prefix_cache", wrap(reset_prefix_cache), methods=["POST"]),
        Route("/v1/chat/completions", wrap(chat), methods=["POST"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})
