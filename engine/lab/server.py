"""OpenAI-compatible HTTP front (Starlette app served by uvicorn).

Mirrors ``vllm/entrypoints/openai/api_server.py``: ``/health``, ``/v1/models``,
``/version``, ``/v1/chat/completions`` (``serving_chat.py``), ``/tokenize`` /
``/detokenize``, ``/metrics``, ``/reset_prefix_cache``, sleep mode's ``/sleep``,
``/wake_up``, ``/is_sleeping`` (``entrypoints/serve/dev/sleep/api_router.py``) and
``/collective_rpc`` (the poison methods: poison.py); vLLM serves these and
``/reset_prefix_cache`` only with ``VLLM_SERVER_DEV_MODE=1``, the lab always.
``--api-key`` guards ``/v1/*`` as in vLLM. Every bad request gets an OpenAI-style JSON error with a 4xx status; an engine
failure gets a 500; nothing drops the connection.

Each route is a small function of (``AppState``, request); ``build_app`` binds them.
"""
from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .app_state import APIError, AppState, error_response
from .config import VERSION, LabConfig
from .engine_core import AsyncEngine, EngineDeadError
from .sleep import SleepError, SleepFailed
from .serving_chat import chat_completions
from .tokenizer import LabTokenizer

__all__ = ["APIError", "build_app", "error_response"]


async def health(st: AppState, request: HTTPRequest) -> Response:
    if st.engine.dead is not None:
        return error_response(503, "EngineCore is dead", "ServiceUnavailableError")
    return Response(status_code=200)


async def models(st: AppState, request: HTTPRequest) -> Response:
    st.check_auth(request)
    cfg = st.cfg
    return JSONResponse({"object": "list", "data": [{
        "id": cfg.served_model_name, "object": "model", "created": int(st.started),
        "owned_by": "residue-lab", "root": cfg.model, "parent": None,
        "max_model_len": cfg.max_model_len, "permission": []}]})


async def version(st: AppState, request: HTTPRequest) -> Response:
    return JSONResponse({"version": VERSION, "engine": "lab",
                         "effective_config": st.cfg.effective(),
                         "patches": st.cfg.patch_status()})


async def tokenize(st: AppState, request: HTTPRequest) -> Response:
    data = await st.read_json(request)
    st.check_model(data)
    if "messages" in data:
        ids = st.templated_ids(data)
    elif isinstance(data.get("prompt"), str):
        ids = st.tokenizer.encode(data["prompt"])
    else:
        raise APIError(400, "give either 'prompt' (a string) or 'messages'")
    out = {"count": int(len(ids)), "max_model_len": st.cfg.max_model_len,
           "tokens": [int(i) for i in ids], "token_strs": None}
    if data.get("return_token_strs"):
        out["token_strs"] = [st.tokenizer.id_to_token(i) for i in ids]
    return JSONResponse(out)


async def detokenize(st: AppState, request: HTTPRequest) -> Response:
    data = await st.read_json(request)
    toks = data.get("tokens")
    if not isinstance(toks, list) or not all(isinstance(t, int) for t in toks):
        raise APIError(400, "'tokens' must be a list of integers", param="tokens")
    if any(t < 0 or t >= st.tokenizer.vocab_size for t in toks):
        raise APIError(400, "token id out of range", param="tokens")
    return JSONResponse({"prompt": st.tokenizer.decode(toks, skip_special_tokens=False)})


async def metrics(st: AppState, request: HTTPRequest) -> Response:
    # --disable-log-stats: vLLM builds no PrometheusStatLogger, the route stays
    body = b"" if st.cfg.disable_log_stats else st.engine.core.metrics.exposition()
    return Response(body,
                    media_type="text/plain; version=0.0.4; charset=utf-8")


async def reset_prefix_cache(st: AppState, request: HTTPRequest) -> Response:
    if st.engine.dead is not None:
        raise APIError(500, "EngineCore is dead", "InternalServerError")
    st.engine.core.reset_prefix_cache()
    return Response(status_code=200)


async def sleep(st: AppState, request: HTTPRequest) -> Response:
    """``POST /sleep?level=1&mode=abort`` (vLLM's defaults)."""
    level = request.query_params.get("level", "1")
    mode = request.query_params.get("mode", "abort")
    try:
        await st.engine.sleep(int(level), mode)
    except ValueError as e:   # SleepError, or a level that is not a number
        raise APIError(400, str(e), param="level") from None
    except SleepFailed as e:
        raise APIError(500, str(e), "InternalServerError") from None
    return Response(status_code=200)


async def wake_up(st: AppState, request: HTTPRequest) -> Response:
    """``POST /wake_up`` (all tags) or ``/wake_up?tags=weights&tags=kv_cache``."""
    tags = request.query_params.getlist("tags") or None
    try:
        st.engine.wake_up(tags)
    except SleepError as e:
        raise APIError(400, str(e), param="tags") from None
    return Response(status_code=200)


async def is_sleeping(st: AppState, request: HTTPRequest) -> Response:
    return JSONResponse({"is_sleeping": st.engine.is_sleeping()})


RPC_METHODS = ("residue_lab_arm", "residue_lab_poison", "residue_lab_describe",
               "residue_lab_restore_pool", "residue_lab_audit",
               "residue_lab_copy_bandwidth")


async def collective_rpc(st: AppState, request: HTTPRequest) -> Response:
    """``POST /collective_rpc {"method", "args", "kwargs"}`` as vLLM's dev mode serves it
    (``{"results": [one per worker]}``); the lab's one worker answers the poison methods
    of ``engine/vllm/poison.py`` (engine/lab/poison.py)."""
    body = await st.read_json(request)
    method = body.get("method")
    if method not in RPC_METHODS:
        raise APIError(400, f"collective_rpc: method {method!r} is not one of "
                            f"{', '.join(RPC_METHODS)}", param="method")
    try:
        out = getattr(st.engine.core.stale, method)(*(body.get("args") or ()),
                                                    **(body.get("kwargs") or {}))
    except (TypeError, ValueError) as e:
        raise APIError(400, f"collective_rpc {method}: {e}", param="args") from None
    return JSONResponse({"results": [out]})


def _guarded(st: AppState, fn):
    """The route handler: fn(st, request), every failure turned into a JSON error."""
    async def handler(request: HTTPRequest) -> Response:
        try:
            return await fn(st, request)
        except APIError as e:
            return error_response(e.status, e.message, e.type, e.param)
        except EngineDeadError as e:
            return error_response(500, str(e), "InternalServerError")
        except Exception as e:  # never drop the connection
            return error_response(500, f"internal error: {type(e).__name__}: {e}",
                                  "InternalServerError")
    return handler


async def _http_error(request: HTTPRequest, exc: HTTPException) -> Response:
    return error_response(exc.status_code, str(exc.detail),
                          "NotFoundError" if exc.status_code == 404 else "BadRequestError")


ROUTES = (
    ("/health", health, ["GET"]),
    ("/ping", health, ["GET", "POST"]),
    ("/v1/models", models, ["GET"]),
    ("/version", version, ["GET"]),
    ("/tokenize", tokenize, ["POST"]),
    ("/detokenize", detokenize, ["POST"]),
    ("/metrics", metrics, ["GET"]),
    ("/reset_prefix_cache", reset_prefix_cache, ["POST"]),
    ("/sleep", sleep, ["POST"]),
    ("/wake_up", wake_up, ["POST"]),
    ("/is_sleeping", is_sleeping, ["GET"]),
    ("/collective_rpc", collective_rpc, ["POST"]),
    ("/v1/chat/completions", chat_completions, ["POST"]),
)


def build_app(cfg: LabConfig, engine: AsyncEngine, tokenizer: LabTokenizer) -> Starlette:
    st = AppState(cfg, engine, tokenizer)
    routes = [Route(path, _guarded(st, fn), methods=methods) for path, fn, methods in ROUTES]
    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
