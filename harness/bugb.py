"""The Bug B rule: which residues a configuration can break at (DESIGN §1).

One rule, used by ``sweep --dry-run``, by residue sampling (``--residues sample:N`` always
keeps the rule's residues) and by the report's "Bug B rule" line. A lone request whose
*final prefill chunk* is exactly ``1 + k`` tokens replays the FULL verify graph; a cache
hit in whole hash units makes that chunk ``len mod unit``. So a break needs:
speculative decoding (k > 0), prefix caching, a cudagraph mode that captures a FULL graph
for the verify step, and no prefill-discriminator fix; it then lands on templated lengths
≡ k + 1 (mod the hit unit).

MTP, EAGLE and DFlash drop matched blocks on a hit (the self-hit ``cached_tokens`` is
below ``len - 1``, the computed tail is longer than the last unit): the rule is about the
final prefill chunk, which the computed tail does not show, so it never reads
``computed_tail``, and the hit unit is never measured from a dropping method's hits
alone when the configuration names one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .ghmarkdown import code, escape_text
from .ranges import residues_phrase
from .vocabulary import FULL_GRAPH_MODES, PREFILL_FIX

__all__ = ["Prediction", "predict", "hit_granularity", "prefill_fix_applied",
           "drops_hit_blocks", "DROPS_HIT_BLOCKS", "vllm_dispatch"]

# Speculative methods whose drafter state makes the engine drop matched blocks on a hit.
DROPS_HIT_BLOCKS = frozenset({"mtp", "eagle", "eagle3", "dflash", "dflash2"})


@dataclass
class Prediction:
    residues: list[int] | None   # None: the rule cannot name residues at this modulus
    armed: bool                  # a Bug B break is expected at all
    why: str                     # markdown
    unit: int | None = None      # the hit unit the prediction is made with, if known


def drops_hit_blocks(method: str | None) -> bool:
    return bool(method) and str(method).lower() in DROPS_HIT_BLOCKS


def hit_granularity(cached_tokens: Iterable[Any]) -> tuple[int | None, int]:
    """gcd of the positive ``cached_tokens`` seen, and how many distinct values it is from."""
    vals = sorted({int(v) for v in cached_tokens if isinstance(v, int) and v > 0})
    if not vals:
        return None, 0
    g = 0
    for v in vals:
        g = math.gcd(g, v)
    return g, len(vals)


def prefill_fix_applied(patches: str | None, patch_status: Any) -> tuple[bool, str]:
    """Is the prefill-discriminator fix on? The engine's own report wins over the asked
    patch set (a fix can be asked for and fail to apply)."""
    if isinstance(patch_status, Mapping) and PREFILL_FIX in patch_status:
        s = str(patch_status[PREFILL_FIX])
        return s == "applied", f"{PREFILL_FIX}: {s}"
    patches = str(patches or "")
    asked = patches == "all" or PREFILL_FIX in patches.split(",")
    return asked, f"patches={patches or '?'} (engine reported no patch status)"


def predict(config: Mapping[str, Any], modulus: int, *, patch_status: Any = None,
            patches: str | None = None, cached_tokens: Iterable[Any] = ()) -> Prediction:
    """The rule for one configuration (a ``ServingConfig.as_dict()`` or a record's
    effective ``config``) swept modulo ``modulus``. ``patch_status`` and ``cached_tokens``
    are what the servers reported, when there are records (none in a dry run)."""
    c, m = config, int(modulus)
    method = c.get("method", c.get("spec"))
    k = int(c.get("draft_tokens") or 0) if method and method != "none" else 0
    if not k:
        return Prediction([], False, "predicts no break: no speculative decoding, so no "
                          "`1 + k` verify shape to mistake a prefill tail for")
    if c.get("prefix_caching") is False:
        return Prediction([], False, "predicts no break: prefix caching is off, so no cache "
                          "hit cuts the prompt tail")
    mode = c.get("cudagraph_mode")
    if mode and mode not in FULL_GRAPH_MODES:
        return Prediction([], False, f"predicts no break: {code(mode)} captures no FULL "
                          "graph for the verify step")
    fixed, how = prefill_fix_applied(c.get("patches") or patches, patch_status)
    if fixed:
        return Prediction([], False, "predicts no break: the prefill-discriminator fix is "
                          f"on ({escape_text(how)})")
    rule = vllm_dispatch(c)
    if rule is not None and rule.prefill_check:
        return Prediction([], False, f"predicts no break: {escape_text(rule.line())}")
    on = f"; {escape_text(rule.line())}" if rule is not None else ""
    unit, source = _hit_unit(c, cached_tokens)
    if unit is None:
        return Prediction(None, True, f"cannot name a residue: k={k}, but no "
                          "`--prefix-match-unit`, so hits align to the KV page (on a "
                          "hybrid model the larger state page, 2048 tokens in the "
                          f"thread), which a mod-{m} sweep cannot resolve{on}")
    armed = (k + 1) % unit
    if unit == m:
        res = [armed]
    elif m % unit == 0:
        res = [r for r in range(m) if r % unit == armed]
    else:
        return Prediction(None, True, f"cannot name a residue: k={k}, {source} {unit} arms "
                          f"lengths ≡ {armed} (mod {unit}), which a mod-{m} sweep cannot "
                          f"resolve{on}", unit)
    return Prediction(res, True, f"predicts {residues_phrase(res)} (k + 1 = {k + 1}, mod "
                      f"{source} {unit}; {code(mode or '?')}, prefill fix off{on})", unit)


def vllm_dispatch(c: Mapping[str, Any]):
    """What vLLM's own uniform-decode dispatch does on the runner this configuration ran
    on (``engine.vllm.patches.releases.dispatch_rule``), or None when that is not known:
    not vLLM, no release in the effective configuration, or neither the runner the log
    names (``model_runner``) nor a forced ``runner``. Records from before the runner was
    recorded carry neither, so their rule line is unchanged."""
    if c.get("engine") != "vllm" or not c.get("vllm_version"):
        return None
    runner = c.get("model_runner") or (c.get("runner") if c.get("runner") in ("v1", "v2") else None)
    if runner is None:
        return None
    from engine.vllm.patches.releases import dispatch_rule   # imports no vLLM
    method = c.get("method") or "none"
    try:
        return dispatch_rule(str(c["vllm_version"]), runner, str(method),
                             hybrid=c.get("geometry") != "dense")
    except ValueError:   # a release older than any read, a method the table does not know
        return None


def _hit_unit(c: Mapping[str, Any], cached_tokens: Iterable[Any]) -> tuple[int | None, str]:
    """The unit cache hits come in, and where it was read from."""
    if c.get("prefix_match_unit"):
        return int(c["prefix_match_unit"]), "match unit"
    if c.get("effective_hash_unit"):
        # what the server says its cache hits align to (lab: the state page on hybrid)
        return int(c["effective_hash_unit"]), "hash unit the server reported"
    if c.get("geometry") == "dense" and c.get("block_size"):
        # a dense model hits in whole KV blocks
        return int(c["block_size"]), "block size (dense, no match unit)"
    g, nvals = hit_granularity(cached_tokens)
    if g and nvals >= 2:
        return g, "measured hit granularity (gcd of cached_tokens)"
    return None, ""
