"""The scheduler trace: what each step ran, as log lines a sweep reads back.

vLLM has no such lines (its ``vllm/v1/core/sched/scheduler.py`` ``SchedulerOutput`` is
not logged per step); the lab writes them so a sweep can prove, from the server's own log,
the shape and the history it meant to exercise (the vLLM plugin's
``RESIDUE_LAB_SCHED_TRACE=1`` writes the same lines, engine/vllm/patches/sched_trace.py):

- ``final prefill chunk:``, one per request whose last prompt chunk runs this step, naming
  what it was batched with and which plan the step took (the uniform-decode check of
  ``gpu_model_runner`` saw ``num_tokens == num_reqs * (1 + k)``); the harness reads it into
  the record's ``load.beside`` (``harness/run/load.py``);
- ``prefill chunk:``, one per scheduled prefill chunk (every chunk, the final one too), with
  the step number and the ids of the whole batch: a history's order of events (an abort
  after the first chunk, two cold prefills in one step);
- ``aborted request=``, one per abort (client disconnect, sleep's abort mode), with how much
  of the prompt was computed: an abort mid-prefill says ``computed < of``;
- ``evicted blocks=``, one per allocation that evicted cached blocks, naming the requests
  that had cached them;
- ``queued request=``, one per request the scheduler takes into its waiting queue, with the
  queue's length after it and whether scheduling is paused: the one sign that a request
  sent while paused (``/sleep?level=0&mode=keep``) has arrived, since /metrics' gauges are
  published by a step and a paused scheduler steps nothing (vLLM 0.26.0 as the lab).
"""
from __future__ import annotations

from ._log import log

__all__ = ["FINAL_CHUNK_PREFIX", "CHUNK_PREFIX", "log_final_chunks", "log_chunks",
           "log_abort", "log_evicted", "log_queued"]

FINAL_CHUNK_PREFIX = "final prefill chunk:"
CHUNK_PREFIX = "prefill chunk:"
WHERE = "scheduler.py:0"


def log_final_chunks(items, plan: str) -> None:
    """``items``: the step's (request, scheduled tokens, drafts), before the step runs."""
    finals = [(req, n) for req, n, _ in items
              if req.is_prefill and req.num_computed_tokens + n >= req.prefill_target]
    if not finals:
        return
    tokens = sum(n for _, n, _ in items)
    decode = sum(1 for req, _, _ in items if not req.is_prefill)
    for req, n in finals:
        log("INFO", WHERE,
            f"{FINAL_CHUNK_PREFIX} request={req.request_id} tokens={n} "
            f"prompt={req.num_prompt_tokens} computed={req.num_computed_tokens} "
            f"batch_reqs={len(items)} batch_tokens={tokens} decode_reqs={decode} "
            f"prefill_reqs={len(items) - decode} dispatch={plan}")


def log_chunks(items, step: int) -> None:
    """One line per prefill chunk of the step (before it runs)."""
    batch = ",".join(req.request_id for req, _, _ in items)
    for req, n, _ in items:
        if req.is_prefill:
            log("INFO", WHERE, f"{CHUNK_PREFIX} request={req.request_id} "
                f"start={req.num_computed_tokens} tokens={n} of={req.num_prompt_tokens} "
                f"step={step} batch={batch}")


def log_abort(req, step: int) -> None:
    log("INFO", WHERE, f"aborted request={req.request_id} computed={req.num_computed_tokens} "
        f"of={req.num_prompt_tokens} step={step}")


def log_evicted(owners: list[str], request_id: str, step: int) -> None:
    if owners:
        log("INFO", WHERE, f"evicted blocks={len(owners)} from={','.join(sorted(set(owners)))} "
            f"request={request_id} step={step}")


def log_queued(req, waiting: int, paused: bool) -> None:
    log("INFO", WHERE, f"queued request={req.request_id} of={req.num_prompt_tokens} "
        f"waiting={waiting} paused={int(paused)}")
