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
from harness.run.load import CANCEL_AFTER, BackgroundLoad, load_facts, server_gauges


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


def test_steady_backgrounds_ask_for_the_whole_context_and_one_that_ends_unproves_the_load():
    """CI of 9b651b3 (docs/testing.md): the lab decodes a 16,384-token background in 3-4 s,
    so on a loaded box the measured request's last chunks ran after every background had
    finished. A steady background now asks for all the context the server has left, and one
    that still ends before it is cut is counted: the load is then not proven, whatever
    /metrics said around the request."""
    bodies: list[dict] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)
        if request.url.path == "/metrics":
            return httpx.Response(200, text="vllm:num_requests_running 3\n")
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 300})
        bodies.append(json.loads(request.content))
        return httpx.Response(200, content=tokens(5))   # ends on its own, as at max_tokens

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as h:
            client = EngineClient("http://engine", http=h)
            async with BackgroundLoad(client, "m", n=3, max_model_len=245_760) as bg:
                async def all_ended():   # each stream ends after its five tokens
                    while bg.ended < 3:
                        await asyncio.sleep(0.01)
                await asyncio.wait_for(all_ended(), 30)   # a hang is a failure, not a stall
                gauges = await server_gauges(client)
            return bg, gauges

    bg, gauges = asyncio.run(go())
    assert [b["max_tokens"] for b in bodies] == [245_760 - 308] * 3   # prompt + 8 of room
    facts = load_facts(bg, gauges, gauges, None)
    assert facts["ended"] == 3 and facts["running_before"] == 3
    assert facts["proven"] is False
    kept = BackgroundLoad(None, "m", n=3)   # none ended: /metrics alone proves it
    assert load_facts(kept, gauges, gauges, None)["proven"] is True
