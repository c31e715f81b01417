"""``--load N``: background conversations on the measured request's server, and what ran
beside the measured request (docs/shapes.md, "Load").

Production is batched; a lone request is not. Before each measured phase, N seeded
background conversations (unrelated documents, the same server so the same speculative
method, ``ignore_eos`` so they decode for long) are started as streams, and the measured
request is sent only once every one of them has streamed a token: they are then in
their decode steps, each scheduled as ``1 + k`` tokens (each may decode to the end of the
server's context, so none ends while the measured request runs), and vLLM's scheduler
(``vllm/v1/core/sched/scheduler.py``) schedules running requests before it, so the
measured request's final prefill chunk is batched beside spec-decode steps, where
``gpu_model_runner``'s uniform-decode check (``num_tokens == num_reqs * (1 + k)`` over the
whole batch) decides the plan. ``cancel`` mode cuts each background stream after a few
tokens and starts it again (an abort and a new prefill beside the measured request); the
measured request waits until every background has been cut once and streams again.

What ran beside it is read back from the server: ``vllm:num_requests_running`` and
``vllm:num_preemptions_total`` from ``/metrics`` before and after the request, and, where
the server logs it (the lab's ``engine/lab/sched_log.py``), the batch its final prefill
chunk was scheduled in. The record's ``load`` carries all of it.
"""
from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from ..serve.client import ClientError, EngineClient
from ..prompts import INSTRUCTION, document_lines
from ..settings.flag_values import LOAD_MODES
from ..errors import HandledError

__all__ = ["LOAD_MODES", "BG_SEED_BASE", "BackgroundLoad", "LoadError", "background_messages",
           "server_gauges", "beside_from_log", "preempted_in_log", "load_facts"]

BG_SEED_BASE = 900_000        # background documents: seeds no measured document uses
BG_DOC_LINES = 24             # a background prompt of a few hundred tokens
# A background decodes (ignore_eos) until it is cut when the measured request returns, so
# it may run to the end of the server's context: a fixed budget ends it first on a fast
# engine. The lab decodes 16,384 tokens in 3-4 s on a 2-core box; under load 7-12 the
# measured request's last prefill chunks once ran after all four backgrounds had finished
# (CI of 9b651b3, docs/testing.md), beside nothing. Where the context length is not known
# (a --url server that does not say), BG_MAX_TOKENS.
BG_MAX_TOKENS = 16384
BG_PROMPT_ROOM = 2048         # room left for a prompt the server could not count
CANCEL_AFTER = 24             # cancel mode: tokens streamed before a background is cut
_FINAL = re.compile(r"final prefill chunk: request=(?P<id>\S+) tokens=(?P<tokens>\d+) "
                    r"prompt=(?P<prompt>\d+) computed=(?P<computed>\d+) "
                    r"batch_reqs=(?P<reqs>\d+) batch_tokens=(?P<btok>\d+) "
                    r"decode_reqs=(?P<dec>\d+) prefill_reqs=(?P<pre>\d+) "
                    r"dispatch=(?P<plan>\w+)")


class LoadError(HandledError, RuntimeError):
    """The background conversations could not be started (the phase did not run under load)."""


def background_messages(i: int, point_seed: int) -> list[dict[str, str]]:
    """The i-th background conversation of a point: its own seeded document, unrelated to
    the measured one."""
    lines = document_lines(BG_DOC_LINES, BG_SEED_BASE + 97 * point_seed + i)
    return [{"role": "user", "content": INSTRUCTION.format(n=BG_DOC_LINES) + "\n\n"
             + "\n".join(lines) + "\n"}]


@dataclass
class BackgroundLoad:
    """N background streams on ``client``'s server while the body of ``async with`` runs."""

    client: EngineClient
    model: str
    n: int
    mode: str = "steady"
    seed: int = 0
    timeout: float = 120.0
    max_model_len: int | None = None
    _tasks: list[asyncio.Task] = field(default_factory=list)
    _started: list[asyncio.Event] = field(default_factory=list)
    restarts: int = 0
    ended: int = 0                # steady backgrounds that finished before they were cut
    drained: bool | None = None   # the server's running count came back after the load
    _base: float | None = None
    _lens: list = field(default_factory=list)   # templated lengths of the backgrounds

    async def __aenter__(self) -> "BackgroundLoad":
        self._base = (await server_gauges(self.client)).get("running")
        self._lens = [await self.client.tokenize(background_messages(i, self.seed), self.model)
                      for i in range(self.n)]
        self._started = [asyncio.Event() for _ in range(self.n)]
        self._tasks = [asyncio.create_task(self._run(i)) for i in range(self.n)]
        gate = asyncio.ensure_future(asyncio.gather(*(e.wait() for e in self._started)))
        try:
            await self._until_streaming(gate)
        except BaseException:
            gate.cancel()
            await self._stop()
            raise
        return self

    async def _until_streaming(self, gate: asyncio.Future) -> None:
        """Return once every background stream has sent a token; a stream that fails
        first, or no token within the timeout, is a ``LoadError``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        pending: set = {gate, *self._tasks}
        while gate in pending:
            left = deadline - loop.time()
            if left <= 0:
                raise LoadError(f"{sum(not e.is_set() for e in self._started)} of {self.n} "
                                f"background conversations streamed nothing in "
                                f"{self.timeout:g}s")
            done, pending = await asyncio.wait(pending, timeout=left,
                                               return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is not gate and t.exception() is not None:
                    raise LoadError(f"a background conversation failed: {t.exception()}")

    async def __aexit__(self, *exc: Any) -> None:
        await self._stop()
        await self._drain()

    async def _drain(self, limit_s: float = 5.0) -> None:
        """Wait (bounded) until the server runs no more requests than before the load: a
        closed stream must abort its request, or the next point on this server (reset
        isolation) would run beside leftovers. ``drained`` says whether it did."""
        if self._base is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_s
        while True:
            running = (await server_gauges(self.client)).get("running")
            if running is not None and running <= self._base:
                self.drained = True
                return
            if loop.time() > deadline:
                self.drained = False
                return
            await asyncio.sleep(0.05)

    async def _stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, ClientError, Exception):
                await t

    async def _run(self, i: int) -> None:
        messages = background_messages(i, self.seed)
        cut = 0   # how often this background was cut and sent again
        while True:
            limit = CANCEL_AFTER if self.mode == "cancel" else None
            used = self._lens[i] + 8 if self._lens[i] else BG_PROMPT_ROOM
            room = BG_MAX_TOKENS if not self.max_model_len else max(
                64, self.max_model_len - used)
            # cancel mode counts a background as started only once it has been cut and
            # sent again: the measured request then runs beside aborts and new prefills
            # on every server, however fast it is (not only where it outlasts a cut)
            ready = self._started[i].set if self.mode != "cancel" or cut else None
            await self.client.stream_chat(messages, model=self.model,
                                          max_tokens=room, seed=self.seed,
                                          on_token=ready, stop_after=limit)
            if self.mode != "cancel":
                # a steady background that finished does not restart (a new prefill
                # beside the measured request is cancel mode's shape, not this one's)
                self.ended += 1
                return
            cut += 1
            self.restarts += 1


async def server_gauges(client: EngineClient) -> dict[str, float]:
    """``running`` (vllm:num_requests_running) and ``preemptions``
    (vllm:num_preemptions_total) from /metrics; {} when the server has none."""
    try:
        text = await client.metrics_text()
    except ClientError:
        return {}
    out: dict[str, float] = {}
    # here, not at the top: start-up cost paid by every sweep process (~11 ms)
    from prometheus_client.parser import text_string_to_metric_families
    for fam in text_string_to_metric_families(text):
        name = fam.name.removesuffix("_total")
        key = {"vllm:num_requests_running": "running",
               "vllm:num_preemptions": "preemptions"}.get(name)
        if key is None:
            continue
        vals = [s.value for s in fam.samples if not s.name.endswith("_created")]
        if vals:
            out[key] = sum(vals)
    return out


def _is(rid: str, request_id: str) -> bool:
    # vLLM's internal id is the completion id with a "-suffix"
    # (engine/vllm/patches/sched_trace.py)
    return rid == request_id or rid.startswith(request_id + "-")


def preempted_in_log(log_path: Path, request_id: str | None) -> int | None:
    """How often the server's log says the measured request was preempted (the lab's and
    the trace's ``preempted request=`` lines); None when the log has none at all."""
    try:
        ids = re.findall(r"preempted request=(\S+)", log_path.read_text(errors="replace"))
    except OSError:
        return None
    if not ids or not request_id:
        return None if not ids else 0
    return sum(1 for rid in ids if _is(rid, request_id))


def beside_from_log(log_path: Path, request_id: str | None) -> dict[str, Any] | None:
    """The batch the measured request's final prefill chunk ran in, from the server's own
    log line (the lab writes one; vLLM does not): None when there is none."""
    if not request_id:
        return None
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    found = None
    for m in _FINAL.finditer(text):
        if _is(m["id"], request_id):
            found = m
    if found is None:
        return None
    return {"final_chunk": int(found["tokens"]), "prompt": int(found["prompt"]),
            "computed_before": int(found["computed"]), "batch_reqs": int(found["reqs"]),
            "batch_tokens": int(found["btok"]), "decode_reqs": int(found["dec"]),
            "prefill_reqs": int(found["pre"]), "dispatch": found["plan"]}


def load_facts(bg: BackgroundLoad, before: dict[str, float], after: dict[str, float],
               beside: dict[str, Any] | None,
               measured_preempted: int | None = None) -> dict[str, Any]:
    """The record's ``load``: how many ran, what /metrics said around the measured
    request, and the batch of its final prefill chunk when the server logged it.
    ``proven``: every background request was running when it was sent and still after it
    returned and none had ended by then (steady mode: none can start in between, so all
    ran beside it throughout), or the server's log shows the chunk beside decode rows.
    ``ended``: steady backgrounds that ran out of context before they were cut."""
    def num(d: dict[str, float], key: str) -> int | None:
        return int(d[key]) if key in d else None
    rb, ra = num(before, "running"), num(after, "running")
    pre = (int(after["preemptions"] - before["preemptions"])
           if "preemptions" in before and "preemptions" in after else None)
    proven = bool(beside and beside.get("decode_reqs")) or (
        bg.mode == "steady" and rb is not None and ra is not None and min(rb, ra) >= bg.n
        and not bg.ended)
    return {"n": bg.n, "mode": bg.mode, "running_before": rb, "running_after": ra,
            "preemptions": pre, "restarts": bg.restarts, "ended": bg.ended, "beside": beside,
            "proven": proven, "drained": bg.drained, "measured_preempted": measured_preempted}
