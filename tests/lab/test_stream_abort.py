"""A streamed chat whose client hangs up is aborted at once, not when the garbage
collector gets to it (``engine/lab/serving_chat.AbortingStream``).

Starlette answers a client's ``http.disconnect`` by cancelling the streaming task; when
that lands while the task waits in ``send`` (the client's socket full, between two
chunks), the body generator stays suspended at its ``yield`` and its ``finally`` (which
aborts the engine request) runs only when the generator is collected. Seen in
tests/harness/test_live_traffic.py: one of six closed streams still decoding 30 s later.
"""
from __future__ import annotations

import asyncio

import pytest
from starlette.responses import StreamingResponse

from engine.lab.serving_chat import AbortingStream


async def _hang_up_mid_send(cls) -> list[bool]:
    closed: list[bool] = []

    async def body():
        try:
            while True:
                yield "data: x\n\n"
        finally:
            closed.append(True)       # where the lab's stream aborts its request

    sent = asyncio.Event()

    async def send(message):
        if message["type"] == "http.response.body":
            sent.set()
            await asyncio.Event().wait()   # the client's socket is full: send blocks

    async def receive():
        await sent.wait()
        return {"type": "http.disconnect"}

    resp = cls(body(), media_type="text/event-stream")   # kept, as a reference cycle would
    # uvicorn's h11 and httptools protocols say ASGI spec 2.3: Starlette listens for the
    # disconnect itself and cancels the stream
    await resp({"type": "http", "asgi": {"spec_version": "2.3"}}, receive, send)
    return list(closed)   # as the response ended (asyncio.run closes leftovers after)


@pytest.mark.parametrize("cls, closed", [(StreamingResponse, []), (AbortingStream, [True])])
def test_a_hang_up_mid_send_closes_the_body_at_once(cls, closed):
    assert asyncio.run(_hang_up_mid_send(cls)) == closed
