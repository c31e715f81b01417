"""``--prompt-logprobs``: the measured request's prompt logprobs against the cold
reference's, position by position (vllm #53488: MTP corrupting ``prompt_logprobs`` while
the text can look fine). The cold phase's are the reference (kept in memory for the
point's later phases, not written); each later phase's record gets, in its
``prompt_logprobs``, how many positions were compared and the first that differs.

vLLM answers ``prompt_logprobs`` at the top level of a chat completion: one entry per
prompt position (None for the first), each ``{token_id: {"logprob": ..., ...}}``.
"""
from __future__ import annotations

from typing import Any

__all__ = ["canonical", "compared", "TOLERANCE"]

# two logprobs of the same token closer than this are the same (a prefill read from the
# cache and one computed run other kernels: noise, not a stale read)
TOLERANCE = 0.05


def canonical(raw: Any) -> list | None:
    """Per position, the sorted ``[token, logprob]`` pairs (None where none); None when
    the server gave no prompt logprobs."""
    if not isinstance(raw, list):
        return None
    out: list = []
    for pos in raw:
        if not isinstance(pos, dict):
            out.append(None)
            continue
        pairs = []
        for tok, v in pos.items():
            lp = v.get("logprob") if isinstance(v, dict) else v
            if isinstance(lp, (int, float)):
                pairs.append([str(tok), round(float(lp), 4)])
        out.append(sorted(pairs))
    return out


def _differs(a: list | None, b: list | None) -> bool:
    if a is None or b is None:
        return a is not b
    ta, tb = {t: lp for t, lp in a}, {t: lp for t, lp in b}
    shared = set(ta) & set(tb)
    return not shared or any(abs(ta[t] - tb[t]) > TOLERANCE for t in shared)


def compared(measured: list | None, reference: list | None) -> dict[str, Any]:
    """What a record's ``prompt_logprobs`` holds: positions compared and the first that
    differs (its index and both sides), or why nothing was compared."""
    if measured is None:
        return {"compared": 0, "why": "the server returned no prompt logprobs"}
    if reference is None:
        return {"compared": 0, "why": "no cold reference (its prompt logprobs are missing)"}
    n = min(len(measured), len(reference))
    for i in range(n):
        if _differs(measured[i], reference[i]):
            return {"compared": n, "first_difference": i, "measured": measured[i],
                    "cold": reference[i]}
    return {"compared": n, "first_difference": None}
