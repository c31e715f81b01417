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
"""
from __future__ import annotations

import logging
import os
from typing import Any

ENV = "RESIDUE_LAB_SCHED_TRACE"
logger = logging.getLogger("vllm.residue_lab.trace")

__all__ = ["ENV", "install", "trace_lines"]


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
            for line in trace_lines(self.requests, dict(out.num_scheduled_tokens)):
                logger.info(line)
            # the lab's preemption line; the field exists where SchedulerOutput has it
            for rid in sorted(getattr(out, "preempted_req_ids", None) or ()):
                logger.info("preempted request=%s (recomputed when resumed)", rid)
        except Exception:  # a trace must never take the engine down
            pass
        return out

    schedule._residue_lab_trace = True  # type: ignore[attr-defined]
    schedule.__wrapped__ = orig  # type: ignore[attr-defined]
    mod.Scheduler.schedule = schedule
    return "installed"
