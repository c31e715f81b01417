"""The scheduler trace of final prefill chunks: one log line per request whose last prompt
chunk runs this step, naming what it was batched with and which plan the step took.

vLLM has no such line (its ``vllm/v1/core/sched/scheduler.py`` ``SchedulerOutput`` is
not logged per step); the lab writes one so a sweep can prove, from the server's own log,
the shape it meant to exercise: the final chunk's size and the batch composition the
uniform-decode check of ``gpu_model_runner`` saw (``num_tokens == num_reqs * (1 + k)``).
The harness reads it back (``harness/run/load.py``) into the record's ``load.beside``.
"""
from __future__ import annotations

from ._log import log

__all__ = ["FINAL_CHUNK_PREFIX", "log_final_chunks"]

FINAL_CHUNK_PREFIX = "final prefill chunk:"


def log_final_chunks(items, plan: str) -> None:
    """``items``: the step's (request, scheduled tokens, drafts), before the step runs."""
    finals = [(req, n) for req, n, _ in items
              if req.is_prefill and req.num_computed_tokens + n >= req.prefill_target]
    if not finals:
        return
    tokens = sum(n for _, n, _ in items)
    decode = sum(1 for req, _, _ in items if not req.is_prefill)
    for req, n in finals:
        log("INFO", "scheduler.py:0",
            f"{FINAL_CHUNK_PREFIX} request={req.request_id} tokens={n} "
            f"prompt={req.num_prompt_tokens} computed={req.num_computed_tokens} "
            f"batch_reqs={len(items)} batch_tokens={tokens} decode_reqs={decode} "
            f"prefill_reqs={len(items) - decode} dispatch={plan}")
