"""The tail a phase was meant to compute, and why the measured one can differ.

A cache hit in whole units of ``u`` tokens on a prompt of templated length ``L`` keeps at
most ``L - 1`` tokens (the last token is always computed), so the tail a hit phase is meant
to exercise is ``((L - 1) mod u) + 1``: the residue itself, or a whole unit at residue 0.
The cold phase computes the whole prompt. Where the server's ``prompt_tokens -
cached_tokens`` says otherwise, ``tail_note`` names the mechanism (the report's rule line
and ``sweep explain`` read it): the Bug B rule is about the FINAL prefill chunk, which only
equals the tail when nothing else splits the prefill.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..judge import bugb
from ..judge.bugb import chunk_budget, drops_hit_blocks, final_chunk
from ..names.phase import PhaseName

__all__ = ["hit_unit", "intended_tail", "tail_note", "budget_final_chunk"]


def hit_unit(cfg: Mapping[str, Any], modulus: int) -> int:
    """The unit hits come in (``bugb.hit_unit``), else the block size, else the sweep's
    modulus."""
    return int(bugb.hit_unit(cfg, default=cfg.get("block_size") or modulus)[0])


def intended_tail(point: Any, phase: str) -> int | None:
    """The computed tail this phase of ``point`` (a ``plan.Point``) is meant to have."""
    length = point.plan.target_len
    if phase == PhaseName.COLD or point.cfg.prefix_caching is False:
        return length
    unit = hit_unit(point.cfg.as_dict(), point.modulus)
    return (length - 1) % unit + 1


def tail_note(requested: Mapping[str, Any], effective: Mapping[str, Any], phase: str,
              intended: int | None, measured: int | None, modulus: int) -> str | None:
    """Why the measured tail differs from the intended one (None when they agree or either
    is unknown)."""
    if intended is None or measured is None or intended == measured:
        return None
    cfg = {**requested, **{k: v for k, v in effective.items() if v is not None}}
    unit = hit_unit(cfg, modulus)
    method = cfg.get("method") or cfg.get("spec")
    if phase == PhaseName.COLD:
        return (f"the cold request computed {measured} of {intended} tokens: something was "
                "cached before it (isolation not proven)")
    if measured == intended + unit and drops_hit_blocks(method):
        return (f"{method} drops the last matched block on a hit (vLLM keeps the drafter's "
                f"state consistent that way): the tail is one unit longer, {measured} = "
                f"{intended} + {unit}, and the final prefill chunk is still {intended} only "
                "if the engine splits it at the unit")
    if str(cfg.get("mamba_cache_mode") or "") == "align":
        block = cfg.get("mamba_block_size") or unit
        return (f"align-mode chunking: the prefill ends chunks at {block}-token block "
                f"boundaries, so the final chunk is {measured} mod {block} = "
                f"{measured % int(block) or block}, not the tail {measured}")
    if measured > intended and (measured - intended) % unit == 0:
        return (f"the hit stopped {(measured - intended) // unit} unit(s) of {unit} short "
                f"of the intended one: tail {measured}, meant {intended}")
    return f"tail {measured} where {intended} was meant: the server's hits are not in units of {unit}"


def budget_final_chunk(cfg: Mapping[str, Any], prompt_tokens: int | None,
                       cached: int | None) -> int | None:
    """The final prefill chunk a lone request computed, from the server's own
    ``prompt_tokens`` and ``cached_tokens`` and the effective chunk budget (vLLM's
    scheduler: chunks of the budget from the first uncached token); None when the budget
    cuts nothing (the prompt fits in it) or a count is missing."""
    if prompt_tokens is None:
        return None
    budget = chunk_budget(cfg, prompt_tokens - (cached or 0))
    if budget is None:
        return None
    return final_chunk(prompt_tokens, budget=budget, hit=cached or 0)
