"""``prompt_logprobs``: the log-probability of each prompt token given the tokens before it,
as the request's own cache holds them (vllm-project/vllm #53488: MTP corrupts
``prompt_logprobs`` while the text can look fine).

Mirrors ``vllm/v1/worker/gpu_model_runner.py`` ``_get_prompt_logprobs_dict``: the scores
are taken from the forward pass the prefill ran, so they reflect what the request really
read. The lab's prefill skips text in bulk and keeps no per-position scores, so they are
recomputed read-only once the prompt is done: a state is advanced over the tokens the
request's KV slots hold (``SeqView.tok``, -1 where a slot does not hold its position);
below the prefix-cache hit from an empty state, as the cached blocks were computed,
and from the hit on from the very state the request resumed from. At each position the
output head's votes (``CopyModel.votes``) give the distribution of the next token; the
entry is the prompt token's log-probability in it (-9999.0 when the head gave it no
weight) and the top N. A slot read wrong, or a stale state resumed from, shows at the
first position it changes the distribution.
"""
from __future__ import annotations

from .model import CopyModel, SeqView, State, logprobs_of

__all__ = ["prompt_logprobs"]

FLOOR = -9999.0   # vLLM clamps -inf the same way in its JSON


def prompt_logprobs(model: CopyModel, view: SeqView, prompt, resumed_at: int,
                    resumed_state: State | None, top: int) -> list:
    """[None, [(prompt token, its logprob), *top (token, logprob)] per later position]."""
    state = State()
    out: list = [None]
    for p in range(len(prompt) - 1):
        if p == resumed_at and resumed_state is not None:
            state = resumed_state.copy()
        x = view.tok(p)
        model.step(state, view, x, p)
        ranked = logprobs_of(model.votes(state, view, x, p))
        want = int(prompt[p + 1])
        lp = dict(ranked).get(want, FLOOR)
        out.append([(want, lp)] + ranked[:top])
    return out
