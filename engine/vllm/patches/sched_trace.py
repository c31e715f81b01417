"""An opt-in scheduler trace for vLLM (``RESIDUE_LAB_SCHED_TRACE=1``): one log line per
request whose final prefill chunk was scheduled this step, naming the batch it is in.

Not a fix: it changes nothing vLLM computes. vLLM logs no per-step scheduler output, so a
sweep could not otherwise prove from the server's own log the shape it meant to exercise
(the final chunk's size, and what the uniform-decode check of ``gpu_model_runner`` saw:
``num_tokens == num_reqs * (1 + k)`` over the batch). It wraps
``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule`` and reads its
``SchedulerOutput`` (``num_scheduled_tokens``, ``total_num_scheduled_tokens``) after
``_update_after_schedule`` has advanced each request's ``num_computed_tokens``; the line
has the lab's format (``engine/lab/sched_log.py``), read back by
``harness/run/load.py``. Which plan the worker then dispatched is decided in another
process, so the line says ``dispatch=unknown``. The request id is vLLM's internal one (the
completion id with a suffix). Preempted requests (``SchedulerOutput.preempted_req_ids``,
where the release has it) get the lab's ``preempted request=`` line too.

For ``--history`` (harness/run/history_log.py, issue 52's contract) it also writes one line
per scheduled prefill chunk (``prefill chunk: request= start= tokens= of= step= batch=``)
and, wrapping ``Scheduler.finish_requests`` (where the API server's abort of a
disconnected client lands, ``RequestStatus.FINISHED_ABORTED``), one per abort of a request
still held (``aborted request= computed= of= step=``): ``computed`` is the scheduler's
``num_computed_tokens`` (under asynchronous scheduling it runs one step ahead of the
model), so ``computed < of`` says the abort landed mid-prefill. Wrapping
``Scheduler.add_request`` it writes one ``queued request= of= waiting= paused=`` line per
request taken into the waiting queue: while scheduling is paused
(``/sleep?level=0&mode=keep``, ``PauseState.PAUSED_ALL``) ``get_num_unfinished_requests``
is 0, the engine core's busy loop never steps, and /metrics' gauges (published from a
step's ``SchedulerStats``) stay as they were, so this line is the only sign that a request
sent while paused has arrived.
"""
from __future__ import annotations

import logging
import os
from typing import Any

ENV = "RESIDUE_LAB_SCHED_TRACE"
logger = logging.getLogger("vllm.residue_lab.trace")

__all__ = ["ENV", "install", "trace_lines", "chunk_lines", "abort_lines", "queued_line"]

_step = [0]   # the scheduler steps this process has traced (the lines' ``step=``)


def trace_lines(requests: dict[str, Any], num_scheduled: dict[str, int]) -> list[str]:
    """The trace lines of one step: ``requests`` is the scheduler's ``requests`` map
    (after the step was scheduled), ``num_scheduled`` its output's tokens per request."""
    total = sum(num_scheduled.values())
    rows = []
    for rid, n in num_scheduled.items():
        req = requests.get(rid)
        if req is None:
            continue
        before = int(req.num_computed_tokens) - int(n)
        rows.append((rid, int(n), int(req.num_prompt_tokens), before))
    decode = sum(1 for _, _, prompt, before in rows if before >= prompt)
    out = []
    for rid, n, prompt, before in rows:
        if before < prompt <= before + n:
            out.append(f"final prefill chunk: request={rid} tokens={n} prompt={prompt} "
                       f"computed={before} batch_reqs={len(rows)} batch_tokens={total} "
                       f"decode_reqs={decode} prefill_reqs={len(rows) - decode} "
                       "dispatch=unknown")
    return out


def chunk_lines(requests: dict[str, Any], num_scheduled: dict[str, int], step: int) -> list[str]:
    """One ``prefill chunk:`` line per request whose prompt is still prefilling this step."""
    batch = ",".join(num_scheduled)
    out = []
    for rid, n in num_scheduled.items():
        req = requests.get(rid)
        if req is None:
            continue
        prompt, before = int(req.num_prompt_tokens), int(req.num_computed_tokens) - int(n)
        if before < prompt:
            out.append(f"prefill chunk: request={rid} start={before} tokens={int(n)} "
                       f"of={prompt} step={step} batch={batch}")
    return out


def abort_lines(requests: dict[str, Any], request_ids: Any, step: int) -> list[str]:
    """One ``aborted`` line per request still held that ``finish_requests`` aborts."""
    ids = (request_ids,) if isinstance(request_ids, str) else (request_ids or ())
    out = []
    for rid in ids:
        req = requests.get(rid)
        if req is not None and not req.is_finished():
            out.append(f"aborted request={rid} computed={int(req.num_computed_tokens)} "
                       f"of={int(req.num_prompt_tokens)} step={step}")
    return out


def queued_line(scheduler: Any, request: Any) -> str:
    """The line of a request the scheduler just queued (the lab's format)."""
    state = getattr(scheduler, "pause_state", None)
    paused = state is not None and getattr(state, "name", str(state)) != "UNPAUSED"
    return (f"queued request={request.request_id} of={int(request.num_prompt_tokens)} "
            f"waiting={len(scheduler.waiting)} paused={int(paused)}")


def install() -> str:
    """Wrap ``Scheduler.schedule`` once in this process; returns what happened."""
    if os.environ.get(ENV) != "1":
        return "off"
    from vllm.v1.core.sched import scheduler as mod

    orig = mod.Scheduler.schedule
    if getattr(orig, "_residue_lab_trace", False):
        return "installed"

    def schedule(self, *args: Any, **kwargs: Any):
        out = orig(self, *args, **kwargs)
        try:
            scheduled = dict(out.num_scheduled_tokens)
            if scheduled:
                _step[0] += 1
            for line in (chunk_lines(self.requests, scheduled, _step[0])
                         + trace_lines(self.requests, scheduled)):
                logger.info(line)
            # the lab's preemption line; the field exists where SchedulerOutput has it
            for rid in sorted(getattr(out, "preempted_req_ids", None) or ()):
                logger.info("preempted request=%s (recomputed when resumed)", rid)
        except Exception:  # a trace must never take the engine down
            pass
        return out

    _put(mod, "schedule", schedule, orig)
    _wrap_finish(mod)
    _wrap_add(mod)
    return "installed"


def _wrap_finish(mod: Any) -> None:
    """``finish_requests``: the abort lines, written before the requests are freed."""
    orig = getattr(mod.Scheduler, "finish_requests", None)
    if orig is None or getattr(orig, "_residue_lab_trace", False):
        return
    from vllm.v1.request import RequestStatus

    def finish_requests(self, request_ids: Any, finished_status: Any, *args: Any, **kw: Any):
        if request_ids is not None and not isinstance(request_ids, str):
            request_ids = list(request_ids)   # read twice: here and by vLLM
        try:
            if finished_status == RequestStatus.FINISHED_ABORTED and request_ids is not None:
                for line in abort_lines(self.requests, request_ids, _step[0]):
                    logger.info(line)
        except Exception:  # a trace must never take the engine down
            pass
        return orig(self, request_ids, finished_status, *args, **kw)

    _put(mod, "finish_requests", finish_requests, orig)


def _wrap_add(mod: Any) -> None:
    """``add_request``: the queued line, written once the request is in the queue."""
    orig = getattr(mod.Scheduler, "add_request", None)
    if orig is None or getattr(orig, "_residue_lab_trace", False):
        return

    def add_request(self, request: Any, *args: Any, **kw: Any):
        out = orig(self, request, *args, **kw)
        try:
            logger.info(queued_line(self, request))
        except Exception:  # a trace must never take the engine down
            pass
        return out

    _put(mod, "add_request", add_request, orig)


def _put(mod: Any, name: str, wrapper: Any, orig: Any) -> None:
    """``Scheduler.NAME`` becomes ``wrapper``, marked as the trace's (installed once) and
    holding the method it wraps."""
    wrapper._residue_lab_trace = True
    wrapper.__wrapped__ = orig
    setattr(mod.Scheduler, name, wrapper)
