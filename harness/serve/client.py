"""Async client for one OpenAI-compatible server: chat, tokenize, metrics, probes.

Thin on purpose: every call returns plain data or raises one of the typed errors below,
so the sweep can tell a dead server (``ServerGone``) from a slow one (``RequestTimeout``)
from an engine error answered over HTTP (``ServerError``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import httpx

from ..errors import HandledError

__all__ = ["DRAFTS", "ACCEPTED", "ClientError", "ServerGone", "RequestTimeout",
           "ServerError", "BadResponse", "parse_token_logprobs", "ChatResult", "shared_http", "EngineClient",
           "spec_counters_from_text", "pool_state_from_text", "tok_per_step", "MetricsScrape",
           "scrape_from_text"]

DRAFTS = "vllm:spec_decode_num_drafts"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
# vLLM's gauges of what its scheduler holds, set after each engine step from the
# scheduler's stats (vllm/v1/metrics/loggers.py, PrometheusStatLogger), and its counter
# of finished requests (labels finished_reason: stop, length, abort, ...)
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
FINISHED = "vllm:request_success"


class ClientError(HandledError, RuntimeError):
    """Base of the client's errors."""


class ServerGone(ClientError):
    """The connection was refused, reset or dropped: the server is not there."""


class RequestTimeout(ClientError):
    """No answer within the timeout."""


class ServerError(ClientError):
    """The server answered with an HTTP error."""

    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


class BadResponse(ClientError):
    """The server answered 2xx with a body that is not an OpenAI chat completion
    (malformed JSON, a cut-off stream, no ``choices``)."""


@dataclass(frozen=True)
class ChatResult:
    answer: str
    content_was_null: bool
    finish_reason: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    latency_s: float
    # [[token, logprob, [[alt, logprob], ...]], ...] when logprobs were asked for and given
    token_logprobs: list | None = None
    request_id: str | None = None     # the completion's ``id`` (the engine's request id)
    # --prompt-logprobs: vLLM's top-level ``prompt_logprobs`` (per prompt position, None first)
    prompt_logprobs: list | None = None


def _request_id_header(request_id: str | None) -> dict[str, str]:
    """vLLM names a request after the client's ``X-Request-Id`` (``chatcmpl-<id>``): the
    server's trace lines of a history's sends are found by it (run/history_log.py)."""
    return {"X-Request-Id": request_id} if request_id else {}


def shared_http() -> httpx.AsyncClient:
    """One connection pool for a whole sweep: building an httpx client loads a TLS context
    (tens of ms), too much to pay per data point."""
    return httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=5.0), trust_env=False,
                             limits=httpx.Limits(max_keepalive_connections=64))


class EngineClient:
    def __init__(self, base_url: str, *, timeout: float = 120.0, api_key: str | None = None,
                 http: httpx.AsyncClient | None = None,
                 reset_path: str = "/reset_prefix_cache"):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # where the engine empties its prefix cache (vLLM's; SGLang's is /flush_cache:
        # EngineAdapter.reset_path)
        self.reset_path = reset_path
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._owns_http = http is None
        self._http = http if http is not None else shared_http()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> "EngineClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, *, timeout: float | None = None,
                       extra_headers: dict | None = None, **kw: Any) -> httpx.Response:
        try:
            resp = await self._http.request(method, self.base_url + path,
                                            headers={**self._headers, **(extra_headers or {})},
                                            timeout=timeout or self.timeout, **kw)
        except httpx.TimeoutException as e:
            raise RequestTimeout(f"{method} {path}: no answer in {timeout or self.timeout:g}s") from e
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError,
                httpx.WriteError, httpx.NetworkError) as e:
            raise ServerGone(f"{method} {path}: {type(e).__name__}: {e}") from e
        if resp.status_code >= 400:
            raise ServerError(resp.status_code, resp.text)
        return resp

    # -- probes ------------------------------------------------------------------------
    async def health(self, timeout: float = 2.0) -> bool:
        try:
            resp = await self._http.get(self.base_url + "/health", headers=self._headers,
                                        timeout=timeout)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    async def models(self) -> list[dict[str, Any]]:
        return (await self._request("GET", "/v1/models", timeout=10)).json().get("data", [])

    async def version(self) -> dict[str, Any]:
        try:
            return (await self._request("GET", "/version", timeout=10)).json()
        except ServerError:
            return {}

    async def reset_prefix_cache(self) -> None:
        await self._request("POST", self.reset_path, timeout=30)

    async def server_info(self, paths: Sequence[str]) -> dict[str, Any]:
        """The first of ``paths`` that answers a JSON object (SGLang: ``/server_info``,
        before it ``/get_server_info``); {} when none does."""
        for path in paths:
            try:
                data = (await self._request("GET", path, timeout=30)).json()
            except (ServerError, ValueError):
                continue
            if isinstance(data, dict):
                return data
        return {}

    # -- sleep mode (vLLM's development endpoints; --isolation restore) ------------------
    async def sleep(self, level: int = 1) -> None:
        await self._request("POST", "/sleep", params={"level": str(level)}, timeout=120)

    async def pause(self) -> None:
        """Scheduling paused, requests kept (``/sleep?level=0&mode=keep``, dev mode): the
        requests sent meanwhile wait, and are scheduled together at ``wake_up``."""
        await self._request("POST", "/sleep", params={"level": "0", "mode": "keep"}, timeout=120)

    async def wake_up(self) -> None:
        await self._request("POST", "/wake_up", timeout=120)

    async def is_sleeping(self) -> bool | None:
        """The server's ``is_sleeping``; None when the answer has no such boolean."""
        try:
            value = (await self._request("GET", "/is_sleeping", timeout=10)).json()
        except ValueError as e:
            raise BadResponse(f"/is_sleeping: not JSON: {e}") from None
        got = value.get("is_sleeping") if isinstance(value, dict) else None
        return got if isinstance(got, bool) else None

    async def collective_rpc(self, method: str, *args: Any) -> Any:
        """vLLM's dev-mode ``POST /collective_rpc``: the first worker's answer (``--poison``:
        harness/serve/poison.py)."""
        resp = await self._request("POST", "/collective_rpc", timeout=120,
                                   json={"method": method, "args": list(args)})
        try:
            results = resp.json().get("results")
        except (ValueError, AttributeError) as e:
            raise BadResponse(f"/collective_rpc {method}: not a JSON object: {e}") from None
        if not isinstance(results, list) or not results:
            raise BadResponse(f"/collective_rpc {method}: no results in {resp.text[:200]!r}")
        return results[0]

    async def sleep_state(self) -> dict[str, float] | None:
        """``vllm:engine_sleep_state`` by its ``sleep_state`` label; None without it."""
        return (await self.pool_state()).get("sleep_state")

    async def pool_state(self) -> dict[str, Any]:
        """What ``/metrics`` says of the engine's pool: requests running and waiting,
        KV-cache usage, the sleep-state gauge; only what the server reports."""
        try:
            text = (await self._request("GET", "/metrics", timeout=10)).text
        except ServerError:
            return {}
        return pool_state_from_text(text)

    async def pool_scrape(self) -> tuple[dict[str, Any], str | None]:
        """``pool_state`` and why the scrape failed (None when it answered): a restore
        check that could not run says which of the two it was (--isolation restore)."""
        try:
            text = (await self._request("GET", "/metrics", timeout=10)).text
        except ClientError as e:
            return {}, str(e) or type(e).__name__
        try:
            return pool_state_from_text(text), None
        except ValueError as e:   # not a Prometheus exposition
            return {}, f"not a Prometheus exposition: {e}"

    # -- work --------------------------------------------------------------------------
    async def tokenize(self, messages: Sequence[dict[str, str]], model: str) -> int | None:
        """Templated length by the server's own tokenizer; None when it has no /tokenize."""
        try:
            resp = await self._request("POST", "/tokenize", timeout=60, json={
                "model": model, "messages": list(messages), "add_generation_prompt": True})
        except ServerError as e:
            if e.status in (404, 405, 501):
                return None
            raise
        data = resp.json()
        return int(data["count"]) if "count" in data else len(data.get("tokens", []))

    async def chat(self, messages: Sequence[dict[str, str]], *, model: str, max_tokens: int,
                   seed: int = 0, logprobs: int = 0, prompt_logprobs: int = 0,
                   request_id: str | None = None) -> ChatResult:
        """One greedy chat completion. ``logprobs`` > 0 asks for each completion token's
        logprob and its top ``logprobs`` alternatives (OpenAI's ``logprobs`` /
        ``top_logprobs``); 0 leaves them out of the request entirely."""
        body: dict[str, Any] = {"model": model, "messages": list(messages),
                                "max_tokens": max_tokens, "temperature": 0.0, "seed": seed,
                                "stream": False}
        if logprobs > 0:
            body.update(logprobs=True, top_logprobs=int(logprobs))
        if prompt_logprobs > 0:   # vLLM's extra parameter (its SamplingParams.prompt_logprobs)
            body["prompt_logprobs"] = int(prompt_logprobs)
        t0 = time.monotonic()
        resp = await self._request("POST", "/v1/chat/completions", json=body,
                                   extra_headers=_request_id_header(request_id))
        latency = time.monotonic() - t0
        try:
            data = resp.json()
        except ValueError:
            raise BadResponse(f"POST /v1/chat/completions: HTTP {resp.status_code} with a body "
                              f"that is not JSON: {resp.text[:120]!r}") from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise BadResponse("POST /v1/chat/completions: no choices in the answer: "
                              f"{resp.text[:120]!r}")
        choice = choices[0]
        content = (choice.get("message") or {}).get("content")
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return ChatResult(
            answer=content if isinstance(content, str) else "",
            content_was_null=content is None,
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
            cached_tokens=_int_or_none(details.get("cached_tokens")) if details else None,
            completion_tokens=_int_or_none(usage.get("completion_tokens")),
            latency_s=latency,
            token_logprobs=parse_token_logprobs(choice.get("logprobs")) if logprobs > 0 else None,
            request_id=data.get("id") if isinstance(data.get("id"), str) else None,
            prompt_logprobs=data.get("prompt_logprobs") if prompt_logprobs > 0 else None,
        )

    async def stream_chat(self, messages: Sequence[dict[str, str]], *, model: str,
                          max_tokens: int, seed: int = 0, on_token=None,
                          stop_after: int | None = None, request_id: str | None = None,
                          ignore_eos: bool = True) -> int:
        """A streamed greedy completion that ignores EOS (vLLM's ``ignore_eos``), for
        background load: ``on_token()`` is called at each content chunk; with
        ``stop_after`` the stream is closed after that many chunks (the server aborts the
        request). Returns the chunks read."""
        body = {"model": model, "messages": list(messages), "max_tokens": max_tokens,
                "temperature": 0.0, "seed": seed, "stream": True, "ignore_eos": ignore_eos}
        n = 0
        try:
            async with self._http.stream("POST", self.base_url + "/v1/chat/completions",
                                         json=body, headers={
                                             **self._headers, **_request_id_header(request_id)},
                                         timeout=self.timeout) as resp:
                if resp.status_code >= 400:
                    raise ServerError(resp.status_code, (await resp.aread()).decode(errors="replace"))
                async for line in resp.aiter_lines():
                    if not line.startswith("data:") or line.strip() == "data: [DONE]":
                        continue
                    n += 1
                    if on_token is not None:
                        on_token()
                    if stop_after is not None and n >= stop_after:
                        break
        except httpx.TimeoutException as e:
            raise RequestTimeout(f"streamed chat: no answer in {self.timeout:g}s") from e
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError,
                httpx.WriteError, httpx.NetworkError) as e:
            raise ServerGone(f"streamed chat: {type(e).__name__}: {e}") from e
        return n

    async def metrics_text(self) -> str:
        """The Prometheus exposition of /metrics (``ServerError`` when there is none)."""
        return (await self._request("GET", "/metrics", timeout=10)).text

    async def scrape(self) -> "MetricsScrape":
        """One GET /metrics, read for a phase: spec-decode counters and what the server
        held. A server without /metrics (or with something else there) is a scrape with
        ``error`` set, never an exception: a dead server still raises ``ServerGone``."""
        try:
            text = (await self._request("GET", "/metrics", timeout=10)).text
        except ServerError as e:
            return MetricsScrape(error=f"/metrics answered HTTP {e.status}")
        return scrape_from_text(text)


@dataclass(frozen=True)
class MetricsScrape:
    """What one /metrics exposition says, as a phase reads it: ``spec`` (drafts, accepted
    tokens: tok/step), and the gauges ``running`` / ``waiting`` and the counter
    ``finished`` (``vllm:request_success_total``) that say what else the server ran
    (run/traffic.py). Each summed over label sets (several engines: their sum); None
    where the exposition has no such metric, all None with ``error`` when there is none."""

    spec: tuple[float, float] | None = None
    running: float | None = None
    waiting: float | None = None
    finished: float | None = None
    error: str | None = None


def _family_sums(text: str) -> dict[str, float]:
    """Metric family name (``_total`` taken off) -> sum of its samples (``_created``
    timestamps left out)."""
    # here, not at the top: start-up cost paid by every sweep process (~11 ms)
    from prometheus_client.parser import text_string_to_metric_families
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        name = family.name.removesuffix("_total")  # untyped exposition keeps the suffix
        values = [s.value for s in family.samples if not s.name.endswith("_created")]
        if values:
            out[name] = out.get(name, 0.0) + sum(values)
    return out


def scrape_from_text(text: str) -> MetricsScrape:
    try:
        sums = _family_sums(text)
    except ValueError as e:   # an HTML page or a proxy's error where /metrics should be
        return MetricsScrape(error=f"/metrics is not a Prometheus exposition ({e})"[:200])
    return MetricsScrape(spec=(sums.get(DRAFTS, 0.0), sums.get(ACCEPTED, 0.0)),
                         running=sums.get(RUNNING), waiting=sums.get(WAITING),
                         finished=sums.get(FINISHED))


def spec_counters_from_text(text: str) -> tuple[float, float]:
    """(drafts, accepted tokens) summed over label sets."""
    sums = _family_sums(text)
    return sums.get(DRAFTS, 0.0), sums.get(ACCEPTED, 0.0)


_POOL_GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
                "vllm:kv_cache_usage_perc": "kv_cache_usage"}


def pool_state_from_text(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # here, not at the top: start-up cost paid by every sweep process (~11 ms)
    from prometheus_client.parser import text_string_to_metric_families
    for family in text_string_to_metric_families(text):
        if family.name in _POOL_GAUGES:
            out[_POOL_GAUGES[family.name]] = sum(s.value for s in family.samples)
        elif family.name == "vllm:engine_sleep_state":
            states = out.setdefault("sleep_state", {})
            for sample in family.samples:
                key = sample.labels.get("sleep_state", "?")
                states[key] = states.get(key, 0) + sample.value
    return out


def tok_per_step(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    """``1 + Δaccepted / Δdrafts``; None when no draft was proposed (or no metrics)."""
    if before is None or after is None:
        return None
    d_drafts = after[0] - before[0]
    if d_drafts <= 0:
        return None
    return round(1.0 + (after[1] - before[1]) / d_drafts, 3)


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def parse_token_logprobs(logprobs: Any) -> list | None:
    """OpenAI's ``choices[0].logprobs`` as the record keeps it: one
    ``[token, logprob, [[alt, logprob], ...]]`` per completion token, logprobs rounded to
    4 decimals (enough for a margin, a tenth of the bytes). None when absent or malformed."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return None
    out = []
    for e in content:
        if not isinstance(e, dict) or not isinstance(e.get("token"), str) or \
                not isinstance(e.get("logprob"), (int, float)):
            return None
        alts = [[a["token"], round(float(a["logprob"]), 4)] for a in e.get("top_logprobs") or []
                if isinstance(a, dict) and isinstance(a.get("token"), str)
                and isinstance(a.get("logprob"), (int, float))]
        out.append([e["token"], round(float(e["logprob"]), 4), alts])
    return out
