"""``--load-mode cancel`` in-process: the measured request waits until every background has
been cut and sent again, however long a cut takes (an ``httpx.MockTransport`` server that
streams a token every few milliseconds: a measured request sent at the first token would
run before any background was cut)."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from harness.serve.client import EngineClient
from harness.run.load import CANCEL_AFTER, BackgroundLoad


async def tokens(n: int):
    chunk = json.dumps({"choices": [{"delta": {"content": "x"}}]})
    for _ in range(n):
        await asyncio.sleep(0.002)
        yield f"data: {chunk}\n\n".encode()
    yield b"data: [DONE]\n\n"


def streaming_server(log: list[str]):
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)   # a real socket read suspends the caller
        if request.url.path == "/metrics":
            return httpx.Response(200, text="vllm:num_requests_running 0\n")
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 300})
        if request.url.path == "/v1/chat/completions":
            body = json.loads(request.content)
            if len(log) < 1000:
                log.append(body["messages"][0]["content"][-40:])
            return httpx.Response(200, content=tokens(4 * CANCEL_AFTER))
        return httpx.Response(404)
    return handler


@pytest.mark.parametrize("mode, least", [("cancel", 1), ("steady", 0)])
def test_the_measured_request_starts_after_every_background_was_cut_once(mode, least):
    log: list[str] = []

    async def go() -> tuple[int, int]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(streaming_server(log))) as h:
            client = EngineClient("http://engine", http=h)
            async with BackgroundLoad(client, "m", n=3, mode=mode) as bg:
                at_start = bg.restarts
                sent = len(log)
            return at_start, sent

    at_start, sent = asyncio.run(go())
    # cancel: three backgrounds each cut once (restarts >= 3) and sent again (>= 6 requests)
    # before the body ran; steady: three streams, none cut
    assert at_start >= 3 * least
    assert sent >= 3 * (1 + least)
    assert len(set(log)) == 3   # three distinct background documents
