"""``--history sibling`` against a server that pauses like vLLM 0.26.0: while scheduling is
paused (``/sleep?level=0&mode=keep``) its engine core steps nothing, so /metrics' waiting
gauge (published from a step) never counts the requests sent meanwhile; the only sign they
arrived is the trace's ``queued request=`` line. On one H100 the driver waited on the gauge
past the requests' own timeout. Here the wait is bounded, the server always woken, and the
point ends ``invalid`` with the reason, or proven where the queued lines show."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

from harness.run.history import HistoryRun, sibling
from harness.serve.client import ChatResult, ClientError, MetricsScrape

LENGTH = 1152


class PausingServer:
    """Chat answers wait while paused (a ClientError past ``timeout``, as the real client's
    "no answer in Ns"); /metrics never reports them waiting; ``queued_lines``: the server
    writes the trace's queued line on arrival and one shared prefill step on wake."""

    def __init__(self, log: Path, timeout: float, queued_lines: bool) -> None:
        self.log, self.timeout, self.queued_lines = log, timeout, queued_lines
        self.awake = asyncio.Event()
        self.awake.set()
        self.calls: list[str] = []
        self.queued: list[str] = []

    def _write(self, line: str) -> None:
        with open(self.log, "a") as f:
            f.write(f"(EngineCore pid=1) INFO [sched_trace.py:1] {line}\n")

    async def pause(self) -> None:
        self.calls.append("pause")
        self.awake.clear()

    async def wake_up(self) -> None:
        self.calls.append("wake_up")
        if self.queued_lines and self.queued:
            batch = ",".join(self.queued)
            for rid in self.queued:
                self._write(f"prefill chunk: request={rid} start=0 tokens={LENGTH} "
                            f"of={LENGTH} step=1 batch={batch}")
        self.awake.set()

    async def scrape(self) -> MetricsScrape:
        return MetricsScrape(waiting=0.0)

    async def tokenize(self, messages, model) -> int:
        return LENGTH

    async def chat(self, messages, *, model, max_tokens, seed=0, request_id=None, **kw):
        rid = f"chatcmpl-{request_id}-0a1b"
        if not self.awake.is_set():
            self.queued.append(rid)
            if self.queued_lines:
                self._write(f"queued request={rid} of={LENGTH} waiting={len(self.queued)} "
                            "paused=1")
        try:
            await asyncio.wait_for(self.awake.wait(), self.timeout)
        except asyncio.TimeoutError:
            raise ClientError(f"POST /v1/chat/completions: no answer in {self.timeout}s")
        return ChatResult("1", False, "length", LENGTH, 0, 1, 0.01, request_id=rid)


def _run(tmp_path: Path, queued_lines: bool, timeout: float = 1.5):
    log = tmp_path / "server.log"
    log.write_text("")
    server = PausingServer(log, timeout, queued_lines)
    plan = SimpleNamespace(messages=[{"role": "user", "content": "doc"}], document="a\nb",
                           target_len=LENGTH)
    point = SimpleNamespace(plan=plan, document_seed=3, residue=0,
                            cfg=SimpleNamespace(history="sibling"))
    h = HistoryRun(point, server, "m", log, LENGTH, timeout, 4, ask=None)
    h.ask = lambda messages=None, request_id=None: server.chat(
        plan.messages, model="m", max_tokens=1, request_id=request_id)
    t0 = time.monotonic()
    res, proof, _, _ = asyncio.run(sibling(h))
    return server, res, proof, time.monotonic() - t0


def test_unseen_queue_while_paused_is_invalid_with_the_reason_and_the_server_woken(tmp_path):
    server, res, proof, took = _run(tmp_path, queued_lines=False)
    assert server.calls == ["pause", "wake_up"]
    assert res.prompt_tokens == LENGTH and [s.role for s in proof.sends] == ["sibling", "measured"]
    assert not proof.proven
    assert proof.reason.startswith("could not see both requests waiting while paused")
    assert took < 1.5   # woken within the requests' own timeout, both answered


def test_queued_lines_end_the_wait_and_the_shared_step_proves_it(tmp_path):
    server, _, proof, took = _run(tmp_path, queued_lines=True, timeout=30.0)
    assert server.calls == ["pause", "wake_up"] and len(server.queued) == 2
    assert proof.proven and proof.reason == "both prefilled in step 1", proof.reason
    assert took < 5.0   # the wait ended when both lines showed, not at its bound
