"""``--history``: what the server does right before the measured request, driven and proven
per point (the names and what each proves: ``names/history.py``).

``DRIVERS`` maps a history's name to its driver. A driver is given the measured request as
``HistoryRun.ask`` and the server's log; it runs what comes before (or beside) the
measured request, sends it, and returns the answer with a ``HistoryProof``: the sends in
their order with the server's ``cached_tokens``, the trace lines (``history_log.py``) and
/metrics deltas that prove the history happened as planned. A proof that is not
``proven`` makes the phase ``invalid`` with its reason (``phase_judge.invalid_reason``);
the measured request is always sent, so the record has its answer all the same.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from ..names.history import COLD_CONTROL, HistoryProof, HistorySend, history_row
from ..prompts import INSTRUCTION, PAD_CANDIDATES, document_lines
from ..serve.client import ChatResult, ClientError, EngineClient, ServerError
from .history_log import LogWatch, TraceEvent
from .plan import Point

__all__ = ["HistoryRun", "Measured", "DRIVERS", "drives", "run_history", "NEXT_TURN_LINES",
           "EVICT_SEED_BASE", "EVICT_MAX_SENDS"]

# next-turn: the new user turn's document, in lines (its padding brings the new templated
# length to the residue)
NEXT_TURN_LINES = 12
EVICT_SEED_BASE = 700_000    # evictors', siblings' and B's documents: seeds no point uses
EVICT_MAX_SENDS = 48         # evictors sent at most (a pool larger than that is not evicted)
ABORT_MAX_TOKENS = 16        # the aborted stream's budget (it is cut during its prefill)
# sibling: the longest scheduling stays paused waiting to see both sends queued, and the
# share of the request timeout it may take (the sends' own clocks run while they wait)
QUEUE_WAIT_S, QUEUE_WAIT_SHARE = 10.0, 1 / 3
QUEUE_POLL_S = 0.05          # how often the log and /metrics are read meanwhile


@dataclass
class HistoryRun:
    """What a driver is given: the point, the server (client, model, log), the measured
    prompt's templated length and the request that measures it."""

    point: Point
    client: EngineClient
    model: str
    log_path: Path
    templated: int | None
    timeout: float
    answer_lines: int
    ask: Callable[..., Awaitable[ChatResult]]   # ask(messages=None, request_id=None)
    pool_tokens: int | None = None              # evict: the KV pool, in tokens

    def __post_init__(self) -> None:
        self.tag = f"rl-{uuid.uuid4().hex[:12]}"   # X-Request-Id prefix of this point's sends

    @property
    def length(self) -> int:
        return self.templated or self.point.plan.target_len

    def proof(self, proven: bool, reason: str, sends=(), log=(), metrics=None,
              finding: str | None = None) -> HistoryProof:
        row = history_row(self.point.cfg.history)
        return HistoryProof(row.name, row.at or "", proven, reason, tuple(sends),
                            tuple(e.line if isinstance(e, TraceEvent) else e for e in log),
                            dict(metrics or {}), finding)

    async def send(self, role: str, messages, max_tokens: int = 1) -> HistorySend:
        r = await self.client.chat(messages, model=self.model, max_tokens=max_tokens,
                                   seed=self.point.document_seed, request_id=f"{self.tag}-{role}")
        return HistorySend(role, r.prompt_tokens, r.cached_tokens, r.request_id,
                           r.finish_reason)


# (answer, proof, the point as measured, its templated length)
Measured = tuple[ChatResult, HistoryProof, Point, "int | None"]


def _sent(role: str, r: ChatResult) -> HistorySend:
    return HistorySend(role, r.prompt_tokens, r.cached_tokens, r.request_id, r.finish_reason)


def _other_doc(h: HistoryRun, i: int, lines: int) -> str:
    return "\n".join(document_lines(lines, EVICT_SEED_BASE + 97 * h.point.document_seed
                                    + 13 * h.point.residue + i))


async def abort_retry(h: HistoryRun) -> Measured:
    """The measured prompt streamed; once the log shows its first prefill chunk the
    server's scheduling is paused (``/sleep?level=0&mode=keep``: no step runs, aborts are
    still processed, in vLLM 0.26.0's engine core as in the lab's), the client hangs up,
    the abort line is awaited, scheduling resumes (``/wake_up``), and the prompt is sent
    again (measured). The pause lands between two steps, a step or a few after the first
    chunk line; the prompt's chunk count (its length over the budget) must exceed that,
    and the abort line's ``computed`` proves it did (``0 < computed < of``)."""
    messages, n = h.point.plan.messages, h.length
    watch, rid = LogWatch(h.log_path), f"{h.tag}-aborted"
    aborts0 = await _aborts(h.client)
    task = asyncio.ensure_future(h.client.stream_chat(
        messages, model=h.model, max_tokens=ABORT_MAX_TOKENS, seed=h.point.document_seed,
        request_id=rid, ignore_eos=False))
    first = await watch.wait(lambda e: e.kind in ("chunk", "final") and e.of_send(rid, n),
                             h.timeout, until=task)
    async with _scheduling_paused(h.client, first is not None and first.kind == "chunk") \
            as paused:
        task.cancel()   # the hang-up: the server aborts the request (paused: between no steps)
        await asyncio.gather(task, return_exceptions=True)
        abort = await watch.wait(lambda e: e.kind in ("abort", "final") and e.of_send(rid, n)
                                 and e is not first, min(h.timeout, 30.0) if first else 0.0)
    aborts = _delta(aborts0, await _aborts(h.client))
    res = await h.ask(request_id=f"{h.tag}-retry")
    sends = (HistorySend("aborted", n, None, rid, "abort"), _sent("retry", res))
    log = tuple(e for e in (first, abort) if e is not None)
    metrics = {"abort_requests": aborts, "paused": paused}
    why = _not_mid_prefill(first, abort)
    if why is None:
        return res, h.proof(True, f"aborted mid-prefill at {abort.start} of {abort.of} "
                            f"tokens{' (scheduling paused)' if paused else ''}, then retried",
                            sends, log, metrics, f"retry hit {res.cached_tokens} of "
                            f"{res.prompt_tokens}"), h.point, h.templated
    return res, h.proof(False, why, sends, log, metrics), h.point, h.templated


def _not_mid_prefill(first: TraceEvent | None, abort: TraceEvent | None) -> str | None:
    """Why the trace does not prove an abort mid-prefill (None: it does, 0 < computed < of)."""
    if first is None:
        return "no prefill chunk of the aborted request in the server's log (no trace)"
    if first.kind == "final":
        return ("the first line of the aborted request was its final chunk: the prefill "
                "ended before the abort")
    if abort is None or abort.kind != "abort":
        return "no abort line of the request before its prefill ended"
    if abort.start is None or abort.of is None or not 0 < abort.start < abort.of:
        return f"the abort landed outside the prefill ({abort.start} of {abort.of} computed)"
    return None


async def interleave(h: HistoryRun) -> Measured:
    """B (A's conversation, a short reply, another document as the next user turn), then A
    again (measured). B's templated prompt begins with all of A's, so B hits A's last
    cached block wherever it ends: a B sharing half of A hit nothing where a hybrid keeps
    its state only where a scheduled chunk ended (vLLM's align mode, H100, 2026-12-06)."""
    b_msgs = [*h.point.plan.messages, {"role": "assistant", "content": "Noted."},
              {"role": "user", "content": _other_doc(h, 0, 40)}]
    b = await h.send("B", b_msgs)
    res = await h.ask(request_id=f"{h.tag}-A")
    sends = (b, _sent("A", res))
    c = b.cached_tokens
    if c is None:
        return res, h.proof(False, "B's cached_tokens not reported", sends), h.point, h.templated
    if not c > 0:   # B's prompt begins with all of A's: any hit is A's (or its answer's)
        return res, h.proof(False, f"B hit {c} tokens of A (wanted a part of A's prompt)",
                            sends), h.point, h.templated
    return res, h.proof(True, f"B hit A's first {c} tokens, then A was sent again", sends,
                        finding=f"A after B hit {res.cached_tokens} of {res.prompt_tokens}"), \
        h.point, h.templated


async def sibling(h: HistoryRun) -> Measured:
    """Another cold prefill of the measured prompt's templated length (another document),
    sent first; the measured one sent while it waits; both scheduled in one step (the
    server's scheduling paused until both are seen queued, where it can pause)."""
    watch = LogWatch(h.log_path)
    lines = max(len(h.point.plan.document.splitlines()), 8)
    s_msgs = await _padded_to(h, INSTRUCTION.format(n=h.answer_lines) + "\n\n"
                              + _other_doc(h, 1, lines) + "\n", h.length)
    sib, res, unseen = await _sent_paused(h, watch, s_msgs)
    sends = (sib, _sent("measured", res))
    watch.read()
    mine = [e for e in watch.seen if _is_send(e, f"{h.tag}-m", res.request_id)]
    theirs = [e for e in watch.seen if _is_send(e, f"{h.tag}-sibling", sib.request_id)]
    shared = ({e.step for e in mine if e.step is not None}
              & {e.step for e in theirs if e.step is not None})
    final = next((e for e in mine if e.kind == "final"), None)
    log = tuple(e for e in (final, *theirs[-1:]) if e is not None)
    if shared:
        return res, h.proof(True, f"both prefilled in step {min(shared)}", sends, log,
                            finding=f"{len(shared)} shared step(s)"), h.point, h.templated
    if final is not None and (final.prefill_reqs or 0) >= 2:
        return res, h.proof(True, f"the measured final chunk ran beside "
                            f"{final.prefill_reqs - 1} other prefill(s)", sends, log,
                            finding="shared the final chunk's step"), h.point, h.templated
    their_final = next((e for e in theirs if e.kind == "final"), None)
    if (final is not None and their_final is not None and (their_final.prefill_reqs or 0) >= 2
            and watch.seen.index(their_final) < watch.seen.index(final)):
        # no step numbers (a final-chunk trace only): the sibling's last chunk ran beside
        # another prefill while the measured one had not finished, and nothing else ran
        return res, h.proof(True, "the sibling's final chunk ran beside the measured "
                            "request's prefill (which ended later)", sends, log,
                            finding="shared the sibling's final step"), h.point, h.templated
    why = unseen or ("no final-chunk line of the measured request (no trace)" if final is None
                     else "the measured prefill shared no step with the sibling's")
    return res, h.proof(False, why, sends, log), h.point, h.templated


async def evict(h: HistoryRun) -> Measured:
    """Unrelated prompts until their tokens exceed the pool, then the measured prompt."""
    lines = max(len(h.point.plan.document.splitlines()), 8)
    watch, sends = LogWatch(h.log_path), []
    pool = await _served_pool(h.client) or h.pool_tokens
    while len(sends) < EVICT_MAX_SENDS and (pool is None and len(sends) < 4 or pool is not None
                                            and sum(s.prompt_tokens or 0 for s in sends) <= pool):
        msgs = [{"role": "user", "content": INSTRUCTION.format(n=h.answer_lines) + "\n\n"
                 + _other_doc(h, 10 + len(sends), lines) + "\n"}]
        sends.append(await h.send("evictor", msgs))
    res = await h.ask(request_id=f"{h.tag}-m")
    sends.append(_sent("measured", res))
    watch.read()
    evictions = [e for e in watch.seen if e.kind == "evict"]
    mine = [e for e in evictions if any(h.tag not in f for f in e.batch)]   # A's blocks
    c, n = res.cached_tokens, res.prompt_tokens or h.length
    unit = h.point.cfg.prefix_match_unit or h.point.cfg.block_size
    full = (n - 1) // unit * unit
    metrics = {"pool_tokens": pool, "evictor_tokens": sum(s.prompt_tokens or 0 for s in sends[:-1]),
               "evictions": len(evictions)}
    log = tuple(mine[:1] + mine[-1:]) if mine else ()
    if c is None:
        return res, h.proof(False, "cached_tokens not reported", sends, log, metrics), \
            h.point, h.templated
    finding = ("miss (cached_tokens 0)" if c == 0 else f"partial hit {c} of {n}" if c < full
               else f"phantom hit: {c} of {n} cached although its blocks were evicted")
    if mine:   # the server's own log: the measured prompt's blocks were evicted
        return res, h.proof(True, f"{len(sends) - 1} evictors evicted the measured prompt's "
                            f"blocks ({len(mine)} eviction line(s)); {finding}", sends, log,
                            metrics, finding), h.point, h.templated
    if c >= full:
        return res, h.proof(False, f"not evicted: the measured send hit {c} of {n} tokens "
                            f"after {len(sends) - 1} evictors", sends, log, metrics), \
            h.point, h.templated
    return res, h.proof(True, f"{len(sends) - 1} evictors, then the measured send: {finding}",
                        sends, log, metrics, finding), h.point, h.templated


async def next_turn(h: HistoryRun) -> Measured:
    """The conversation continued: the passage as the assistant's answer, then a new user
    turn (the instruction over a short new document, as an agent appends a tool's output)
    padded so that the new templated length hits the residue (measured; its reference is
    the new document's passage)."""
    plan = h.point.plan
    head = [*plan.messages, {"role": "assistant", "content": plan.expected or ""}]
    lines = _other_doc(h, 2, NEXT_TURN_LINES).split("\n")
    turn = INSTRUCTION.format(n=h.answer_lines) + "\n\n" + "\n".join(lines) + "\n"

    def conv(unit: str, m: int) -> list[dict[str, str]]:
        return [*head, {"role": "user", "content": turn + unit * m}]
    found = None
    for unit in PAD_CANDIDATES:
        base, top = [await h.client.tokenize(conv(unit, m), h.model) for m in (0, plan.modulus - 1)]
        if base is not None and top == base + plan.modulus - 1:
            found = unit, base
            break
    if found is None:
        res = await h.ask(messages=conv(" ~", 0), request_id=f"{h.tag}-turn2")
        return res, h.proof(False, "no padding unit adds one templated token per repetition "
                            "in the new turn", (_sent("turn-2", res),)), h.point, h.templated
    unit, base = found
    m = (plan.residue - base) % plan.modulus
    msgs = conv(unit, m)
    point = dataclasses.replace(h.point, plan=dataclasses.replace(
        plan, messages=tuple(msgs), target_len=base + m, pad_count=m,
        expected="\n".join(lines[: h.answer_lines]), document="\n".join(lines)))
    res = await h.ask(messages=msgs, request_id=f"{h.tag}-turn2")
    sends = (_sent("turn-2", res), await _cold_control(h, msgs))
    if not (res.cached_tokens or 0) > 0:
        return res, h.proof(False, f"the new turn did not hit the previous one (cached_tokens "
                            f"{res.cached_tokens})", sends), point, base + m
    return res, h.proof(True, f"new turn of {base + m} templated tokens (residue "
                        f"{plan.residue}) after the first turn", sends,
                        finding=f"hit {res.cached_tokens}, tail {base + m - res.cached_tokens}"), \
        point, base + m


async def _cold_control(h: HistoryRun, msgs: list[dict[str, str]]) -> HistorySend:
    """The new turn sent again on an emptied prefix cache, after the measured send (the
    last phase of its point, so nothing measured comes after it): what this server answers
    the two-turn prompt cold (``names/history.COLD_CONTROL``; its ``cached_tokens`` 0 proves
    it cold, ``phase_judge.control_reference`` reads it)."""
    try:
        await h.client.reset_prefix_cache()
    except ServerError as e:   # refused (not served): no control; a gone server is a crash
        return HistorySend(COLD_CONTROL, extra={"skipped": f"/reset_prefix_cache: {e}"})
    r = await h.ask(messages=msgs, request_id=f"{h.tag}-turn2-cold")
    return HistorySend(COLD_CONTROL, r.prompt_tokens, r.cached_tokens, r.request_id,
                       r.finish_reason, extra={"answer": r.answer or ""})


DRIVERS: dict[str, Callable[[HistoryRun], Awaitable[Measured]]] = {
    "abort-retry": abort_retry, "interleave": interleave, "sibling": sibling,
    "evict": evict, "next-turn": next_turn,
}


def drives(point: Point, phase: str) -> bool:
    """This phase of ``point`` is the one its history runs at."""
    row = history_row(point.cfg.history)
    return row.at == phase and row.name in DRIVERS


async def run_history(h: HistoryRun) -> Measured:
    return await DRIVERS[h.point.cfg.history](h)


def _is_send(e: TraceEvent, tag: str, answered_id: str | None) -> bool:
    """The event is of the send tagged ``tag``, or of the request the server answered as
    ``answered_id`` (a server that names requests itself: its trace uses that id)."""
    return tag in e.request or bool(answered_id) and (
        e.request == answered_id or e.request.startswith(f"{answered_id}-"))


@contextlib.asynccontextmanager
async def _scheduling_paused(client: EngineClient, pause: bool = True):
    """Scheduling paused (``EngineClient.pause``) inside, resumed on the way out whatever
    happens there; yields False where not asked or the server cannot pause (then the
    history runs unpaused and its proof says whether it happened all the same)."""
    paused = False
    if pause:
        try:
            await client.pause()
            paused = True
        except ClientError:
            pass
    try:
        yield paused
    finally:
        if paused:
            await client.wake_up()


async def _sent_paused(h: HistoryRun, watch: LogWatch, s_msgs) -> tuple[
        HistorySend, ChatResult, str | None]:
    """The sibling, then the measured request once the sibling is seen queued, both while
    scheduling is paused; the pause is lifted once both are seen queued or the wait's
    bound passed, whichever first, so the sends are answered within their timeout. The
    third value: why the history is not what was planned (None: both seen queued, or the
    server cannot pause)."""
    bound = min(QUEUE_WAIT_S, h.timeout * QUEUE_WAIT_SHARE)
    deadline = asyncio.get_running_loop().time() + bound
    res_task, seen = None, 0
    async with _scheduling_paused(h.client) as paused:
        sib_task = asyncio.ensure_future(h.send("sibling", s_msgs))
        if not paused or (seen := await _until_queued(h, watch, 1, deadline)) >= 1:
            res_task = asyncio.ensure_future(h.ask(request_id=f"{h.tag}-m"))
            if paused:
                seen = await _until_queued(h, watch, 2, deadline)
    if res_task is None:   # the sibling never showed: the measured request goes unpaused
        res_task = asyncio.ensure_future(h.ask(request_id=f"{h.tag}-m"))
    sib, res = await asyncio.gather(sib_task, res_task)
    unseen = None if not paused or seen >= 2 else (
        f"could not see both requests waiting while paused ({seen} of 2 seen queued in "
        f"{bound:g} s, by the log's queued lines "
        "or /metrics' vllm:num_requests_waiting); scheduling resumed")
    return sib, res, unseen


async def _until_queued(h: HistoryRun, watch: LogWatch, n: int, deadline: float) -> int:
    """How many of this point's sends the server shows queued, polled until ``n`` or the
    deadline: its log's ``queued request=`` lines (the trace's, written while paused),
    or /metrics' waiting gauge where the server publishes it while paused (vLLM 0.26.0
    does not: its gauges come from a step, and a paused scheduler steps nothing)."""
    loop = asyncio.get_running_loop()
    while True:
        watch.read()
        queued = len({e.request for e in watch.seen if e.kind == "queued" and h.tag in e.request})
        seen = max(queued, int((await h.client.scrape()).waiting or 0))
        if seen >= n or loop.time() >= deadline:
            return seen
        await asyncio.sleep(QUEUE_POLL_S)


async def _padded_to(h: HistoryRun, content: str, target: int) -> list[dict[str, str]]:
    """``content`` padded to ``target`` templated tokens (a pad unit that adds one token
    each, checked by /tokenize); as near as it gets where none does."""
    conv = lambda m, unit: [{"role": "user", "content": content + unit * m}]  # noqa: E731
    base = await h.client.tokenize(conv(0, ""), h.model) or target
    for unit in PAD_CANDIDATES:
        msgs = conv(max(target - base, 0), unit)
        if await h.client.tokenize(msgs, h.model) == target:
            return msgs
    return conv(0, "")


async def _aborts(client: EngineClient) -> float | None:
    """``vllm:request_success_total{finished_reason="abort"}`` (vLLM's
    v1/metrics/loggers.py; the lab serves the same family), None where not served."""
    try:
        text = await client.metrics_text()
    except Exception:   # a server without /metrics: the trace lines alone decide
        return None
    total = None
    for line in text.splitlines():
        if line.startswith("vllm:request_success") and 'finished_reason="abort"' in line:
            total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


async def _served_pool(client: EngineClient) -> int | None:
    """The KV pool in tokens as vLLM's ``vllm:cache_config_info`` labels say it
    (``num_gpu_blocks`` x ``block_size``, v1/metrics/loggers.py); None where not served."""
    try:
        text = await client.metrics_text()
    except Exception:   # no /metrics: the configuration's pool is used
        return None
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            blocks, size = labels.get("num_gpu_blocks"), labels.get("block_size")
            if blocks and size and blocks.isdigit() and size.isdigit():
                return int(blocks) * int(size)
    return None


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def pool_tokens(cfg: Any) -> int | None:
    """evict: the KV pool the configuration asked for, in tokens (None: the engine's)."""
    return cfg.num_gpu_blocks * cfg.block_size if cfg.num_gpu_blocks else None
