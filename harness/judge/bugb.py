"""The Bug B rule: which residues a configuration can break at (DESIGN §1).

One rule, used by ``sweep --dry-run``, by residue sampling (``--residues sample:N`` always
keeps the rule's residues), by ``--isolation auto``'s fresh neighbourhood, by ``--modulus
auto`` and by the report's "Bug B rule" line. A request whose *final prefill chunk* is
exactly ``1 + k`` tokens, scheduled as a shape-uniform batch, replays the FULL verify graph.
Two things cut that chunk (docs/shapes.md), as vLLM's scheduler does
(``vllm/v1/core/sched/scheduler.py``: a prefill is scheduled from the first uncached token
in chunks of at most ``--max-num-batched-tokens``):

- a cache hit in whole hash units: the tail is ``L mod unit`` (the *hit tail*);
- the chunked-prefill budget ``B``: from the hit (or from 0, cold / caching off) the prefill
  runs in chunks of ``B``, so the final chunk is ``(tail - 1) mod B + 1``: with caching off
  ``L mod B`` (the *budget tail*; a public Kimi-K3 report breaks at 4,608·n + 4).

So a break needs speculative decoding (k > 0), a cudagraph mode that captures a FULL graph
for the verify step, no prefill-discriminator fix, and a hit tail or a budget tail of
``k + 1``. vLLM >= 0.31's V2 runner also sends a *1-token* final chunk over existing context
to the decode graph on purpose (``prefill_runs_as_decode``, the release table's
``decode_graph_eligible``): those tails are named as residues to measure (``watch``), not as
predicted breaks. So are, on vLLM, the batched tails under ``--load``: a ``1 + k``-token
chunk beside decode rows breaks the lab by mechanism; on real vLLM 0.26.0 it broke on a fresh
server and was clean on reset servers, so whether it breaks depends on the server's history
(``releases.load_measured``, reports/h200/shapes/).

MTP, EAGLE and DFlash drop matched blocks on a hit (the self-hit ``cached_tokens`` is
below ``len - 1``, the computed tail is longer than the last unit): the rule is about the
final prefill chunk, which the computed tail does not show, so it never reads
``computed_tail``, and the hit unit is never measured from a dropping method's hits
alone when the configuration names one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..text.phrase import Code, Phrase, Text
from ..text.ranges import residues_phrase
from ..names.engine import EngineName

__all__ = ["Prediction", "Shape", "NO_RULE", "predict", "hit_granularity", "prefill_fix_applied",
           "drops_hit_blocks", "DROPS_HIT_BLOCKS", "vllm_dispatch", "final_chunk", "chunk_budget",
           "shapes_of", "auto_modulus", "hit_unit", "armed_batch", "FULL_GRAPH_MODES", "PREFILL_FIX"]
# cudagraph modes that capture a FULL graph for the speculative verify step (Bug B).
FULL_GRAPH_MODES = frozenset({"FULL", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"})
PREFILL_FIX = "prefill-discriminator"   # the patch that gives the dispatch a prefill check
NO_RULE: dict[str, str] = {EngineName.SGLANG: (   # no lone-request rule in the source
    "SGLang 0.5.12 picks a CUDA graph by forward mode, not shape: sglang.srt.model_executor."
    "model_runner.ModelRunner._forward_raw replays one only for ForwardMode.is_cuda_graph "
    "(DECODE, TARGET_VERIFY, IDLE, DLLM_EXTEND) where CudaGraphRunner.can_run fits the batch "
    "size, and a prefill chunk is EXTEND; hits are whole pages of at most L - 1 tokens (sglang."
    "srt.managers.schedule_batch.Req.init_next_round_input): a self-hit computes (L - 1) mod "
    "page + 1; its open reports (#22819, #23392) need other requests beside it")}
# Speculative methods whose drafter state makes the engine drop matched blocks on a hit.
DROPS_HIT_BLOCKS = frozenset({"mtp", "eagle", "eagle3", "dflash", "dflash2"})


@dataclass
class Prediction:
    residues: list[int] | None   # None: the rule cannot name residues at this modulus
    armed: bool                  # a Bug B break is expected at all
    reason: Phrase               # why (a reader renders it: markdown, plain text)
    unit: int | None = None      # the hit unit the prediction is made with, if known
    watch: list[int] = field(default_factory=list)   # routes to measure, not predicted
    budget: int | None = None    # the chunk budget that cuts a final chunk, when it does
    # --load-mode cancel: no residue is named ahead; a break is predicted per measured
    # request whose final chunk of this many tokens ran in a shape-uniform batch (its
    # record's load.beside): see ``armed_batch``
    per_batch: int | None = None
    measured_only: bool = False   # the engine has no rule (NO_RULE): what ran is the answer

    @property
    def why(self) -> str:
        """The reason as markdown (the report's spelling)."""
        return self.reason.markdown()


@dataclass(frozen=True)
class Shape:
    """One way a prompt's final prefill chunk is cut: lengths ``L`` with ``L mod period``
    in ``tails`` end in the chunk the shape names."""
    name: str                 # "hit tail" | "budget tail"
    period: int
    tails: frozenset[int]
    phases: str               # which phases compute that chunk
    size: int                 # the final chunk's size (k + 1, or 1 for the V2 carve-out)

    def residues(self, modulus: int) -> list[int] | None:
        """The residues mod ``modulus`` the shape lands on (None: it repeats with a
        period the modulus does not resolve)."""
        q = _min_period(self.period, self.tails)
        if modulus % q:
            return None
        mods = {t % q for t in self.tails}
        return [r for r in range(modulus) if r % q in mods]

    @property
    def modulus(self) -> int:
        return _min_period(self.period, self.tails)

    def covers(self, length: int) -> bool:
        """Does a prompt of ``length`` tokens end in this shape's final chunk?"""
        return length % self.period in self.tails


def final_chunk(length: int, *, budget: int | None, hit: int = 0) -> int:
    """The final prefill chunk of a lone request of ``length`` tokens with ``hit`` tokens
    cached, under a chunk ``budget`` (None: one chunk): vLLM schedules a prefill from the
    first uncached token in chunks of at most the budget."""
    tail = length - hit
    return (tail - 1) % budget + 1 if budget and tail > 0 else tail


def chunk_budget(c: Mapping[str, Any], longest: int | None = None) -> int | None:
    """The chunk budget that can cut a prompt's final chunk: the configuration's
    ``max_num_batched_tokens`` when one is known and the prompts (``longest``, when known)
    are longer than it; None otherwise (a prompt within the budget is one chunk)."""
    b = c.get("max_num_batched_tokens")
    if not b:
        return None
    b = int(b)
    return b if longest is None or int(longest) > b else None


def _min_period(period: int, tails: Iterable[int]) -> int:
    marks = {t % period for t in tails}
    for q in sorted(d for d in range(1, period + 1) if period % d == 0):
        reduced = {m % q for m in marks}
        if all(((x % q) in reduced) == (x in marks) for x in range(period)):
            return q
    return period


def _hit_shape(unit: int, budget: int | None, size: int) -> Shape:
    tails = frozenset(x for x in range(unit)
                      if final_chunk(x or unit, budget=budget) == size)
    return Shape("hit tail", unit, tails, "hit phases", size)


def _budget_shape(budget: int, size: int, caching: bool) -> Shape:
    return Shape("budget tail", budget, frozenset({size % budget}),
                 "cold" if caching else "every phase", size)


def shapes_of(c: Mapping[str, Any], k: int, unit: int | None, budget: int | None,
              size: int | None = None) -> list[Shape]:
    """The shapes that cut a final chunk of ``size`` (default ``k + 1``) tokens."""
    size = size or k + 1
    out = []
    if c.get("prefix_caching") is not False and unit:
        out.append(_hit_shape(unit, budget, size))
    if budget:
        out.append(_budget_shape(budget, size, c.get("prefix_caching") is not False))
    return out


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
            patches: str | None = None, cached_tokens: Iterable[Any] = (),
            longest: int | None = None, load: int = 0, load_mode: str = "steady",
            lengths: Mapping[int, Iterable[int]] | None = None) -> Prediction:
    """The rule (see :func:`_predict`); under ``--load`` on vLLM the batched residues are
    named to measure, not predicted (:func:`_batched_on_vllm`); under ``--load-mode
    cancel`` no residue is named ahead (:func:`_cancelled`)."""
    pred = _predict(config, modulus, patch_status=patch_status, patches=patches,
                    cached_tokens=cached_tokens, longest=longest, load=load, lengths=lengths)
    if load and load_mode == "cancel" and pred.armed:
        return _cancelled(config, pred, int(load))
    if load and config.get("engine") == EngineName.VLLM and pred.armed and pred.residues:
        return _batched_on_vllm(config, pred, int(load))
    return pred


def _cancelled(c: Mapping[str, Any], pred: Prediction, load: int) -> Prediction:
    """Cancel mode cuts each background after a few tokens and sends it again, so what runs
    beside a measured request's final chunk (0 to ``load`` decode rows, re-sent prefills,
    each taking its share of the budget) is not known ahead and the load arithmetic names
    no residue. What the rule still says is per measured request: a final chunk of
    ``1 + k`` tokens in a batch whose every row is ``1 + k`` tokens replays the verify
    graph; the records' ``load.beside`` shows which requests ran that shape."""
    size = _draft_count(c) + 1
    return Prediction(None, True, Phrase.of(
        "names no residue ahead under ", Code(f"--load {load} --load-mode cancel"),
        ": the backgrounds are cut and sent again, so the rows beside each measured "
        "request's final chunk vary; it predicts a break at each measured request whose "
        f"final chunk of {size} tokens (1 + k) ran in a batch of {size}-token rows only "
        "(its record's ", Code("load.beside"), ")"), pred.unit, budget=pred.budget,
        per_batch=size)


def armed_batch(beside: Mapping[str, Any] | None, size: int) -> bool | None:
    """Did this measured request's final chunk run in the shape the rule is about: ``size``
    (``1 + k``) tokens in a batch of ``size``-token rows only (``num_tokens == num_reqs *
    (1 + k)``)? None when the server logged no batch (``load.beside`` absent)."""
    if not beside or beside.get("final_chunk") is None:
        return None
    reqs, tokens = beside.get("batch_reqs"), beside.get("batch_tokens")
    return int(beside["final_chunk"]) == size and reqs is not None and tokens is not None \
        and int(tokens) == int(reqs) * size


def _draft_count(c: Mapping[str, Any]) -> int:
    method = c.get("method", c.get("spec"))
    return int(c.get("draft_tokens") or 0) if method and method != "none" else 0


def _batched_on_vllm(c: Mapping[str, Any], pred: Prediction, load: int) -> Prediction:
    """A ``1 + k``-token final chunk beside ``load`` decode rows is shape-uniform, and the lab
    breaks there by mechanism; on real vLLM 0.26.0 the one such cell broke on a fresh server
    and was clean on reset servers (the release table's ``load_measured``): what the replay
    reads depends on the server's history, so the residues are measured (auto: on fresh
    servers), and ngram's decode rows carry 0..k drafts, so the chunk the budget leaves is
    not fixed."""
    from engine.vllm.patches.releases import load_measured   # imports no vLLM
    first, *rest = pred.reason.parts or ("",)
    shape = Phrase.of(first.removeprefix("predicts ") if isinstance(first, str) else first,
                      *rest)
    ngram = ("; ngram's decode rows carry 0 to k drafts, so the budget they leave, and the "
             "final chunk, vary" if c.get("method") == "ngram" else "")
    why = Phrase.of("does not predict a break under ", Code(f"--load {load}"), " on vLLM; "
                    f"{residues_phrase(pred.residues)} measured, not predicted: a batched ",
                    Code("1 + k"), "-token final chunk breaks real vLLM on some "
                    "servers, not on others (",
                    Text(load_measured(c.get("vllm_version"))), f"{ngram}); the batched "
                    "shape: ", shape)
    return Prediction([], False, why, pred.unit, watch=list(pred.residues), budget=pred.budget)


def _predict(config: Mapping[str, Any], modulus: int, *, patch_status: Any = None,
             patches: str | None = None, cached_tokens: Iterable[Any] = (),
             longest: int | None = None, load: int = 0,
             lengths: Mapping[int, Iterable[int]] | None = None) -> Prediction:
    """The rule for one configuration (a ``ServingConfig.as_dict()`` or a record's
    effective ``config``) swept modulo ``modulus``. ``patch_status`` and ``cached_tokens``
    are what the servers reported, when there are records (none in a dry run);
    ``longest``: the longest templated prompt swept, when known (a chunk budget above it
    cuts nothing). ``load``: background requests decoding beside each measured one
    (``--load N``): vLLM's scheduler gives running requests their ``1 + k`` decode tokens
    first, so the measured prefill is chunked by ``B - N(1 + k)``. ``lengths`` (residue ->
    the templated lengths swept there) names residues a shape lands on even where its
    period does not divide the modulus."""
    c, m = config, int(modulus)
    unknown = [f for f in ("method", "draft_tokens", "cudagraph_mode", "patches")
               if f in (c.get("not_reported") or ())]
    if unknown:   # a live server (sweep --url) that does not say what it runs
        return Prediction(None, False, Phrase.of("cannot name a residue: the server does not "
                                                 f"report its {', '.join(unknown)}"))
    if (why := NO_RULE.get(str(c.get("engine")))) is not None:
        return Prediction(None, False, Phrase.of("no rule: measured only (", Text(why), ")"),
                          measured_only=True)
    k = _draft_count(c)
    if not k:
        return Prediction([], False, Phrase.of("predicts no break: no speculative decoding, so "
                                               "no ", Code("1 + k"), " verify shape to mistake "
                                               "a prefill tail for"))
    budget = chunk_budget(c, longest)
    if budget and load:
        budget = max(1, budget - int(load) * (k + 1))
    caching = c.get("prefix_caching") is not False
    if not caching and not budget:
        return Prediction([], False, Phrase.of("predicts no break: prefix caching is off, so "
                                               "no cache hit cuts the prompt tail"))
    mode = c.get("cudagraph_mode")
    if mode and mode not in FULL_GRAPH_MODES:
        return Prediction([], False, Phrase.of("predicts no break: ", Code(mode), " captures "
                                               "no FULL graph for the verify step"))
    fixed, how = prefill_fix_applied(c.get("patches") or patches, patch_status)
    if fixed:
        return Prediction([], False, Phrase.of("predicts no break: the prefill-discriminator "
                                               "fix is on (", Text(how), ")"))
    unit, source = hit_unit(c, cached_tokens) if caching else (None, "")
    return _by_shape(c, m, k, unit, source, budget, load=load, longest=longest, lengths=lengths)


def _by_shape(c: Mapping[str, Any], m: int, k: int, unit: int | None, source: str,
              budget: int | None, *, load: int, longest: int | None,
              lengths: Mapping[int, Iterable[int]] | None) -> Prediction:
    """The rule past its preconditions (speculative decoding on, a FULL graph for the
    verify step, the fix off): which shapes leave a ``1 + k`` tail, and at which residues."""
    caching, mode = c.get("prefix_caching") is not False, c.get("cudagraph_mode")
    rule = vllm_dispatch(c)
    if rule is not None and rule.prefill_check:
        return _checked(rule, c, k, unit, budget, m)
    on = Phrase.of("; ", Text(rule.line())) if rule is not None else Phrase.of()
    if caching and unit is None:
        return Prediction(None, True, Phrase.of(
            f"cannot name a residue: k={k}, but no ", Code("--prefix-match-unit"), ", so hits "
            "align to the KV page (on a hybrid model the larger state page, 2048 tokens in the "
            f"thread), which a mod-{m} sweep cannot resolve", on), budget=budget)
    shapes = shapes_of(c, k, unit, budget)
    named = [(sh, sh.residues(m)) for sh in shapes]
    armed = (k + 1) % unit if unit else k + 1
    if not budget and named[0][1] is None:
        return Prediction(None, True, Phrase.of(
            f"cannot name a residue: k={k}, {source} {unit} arms lengths ≡ {armed} (mod "
            f"{unit}), which a mod-{m} sweep cannot resolve", on), unit)
    if lengths:
        named = [(sh, rs if rs is not None else _by_length(sh, lengths)) for sh, rs in named]
    lost = [sh for sh, res in named if res is None]
    res = sorted({r for _, rs in named if rs for r in rs})
    if not budget:
        return Prediction(res, True, Phrase.of(
            f"{_predicts(res)} (k + 1 = {k + 1}, mod {source} {unit}; ",
            Code(mode or "?"), ", prefill fix off", on, ")"), unit)
    where = "; ".join(_shape_phrase(sh, source, load) for sh in shapes)
    tail = Phrase.of("; ", Code(mode or "?"), ", prefill fix off", on)
    if lost and not res:
        auto = auto_modulus(c, longest)[0]
        hint = Phrase.of(" (", Code("--modulus auto"), f" sweeps mod {auto})") if auto != m \
            else Phrase.of()
        return Prediction(None, True, Phrase.of(
            f"cannot name a residue: k={k}, {where}, which a mod-{m} sweep cannot resolve",
            hint, tail), unit, budget=budget)
    miss = ("; the " + " and the ".join(sh.name for sh in lost) + f" cannot be resolved "
            f"mod {m}" if lost else "")
    return Prediction(res, True, Phrase.of(f"{_predicts(res)} (k + 1 = {k + 1}: "
                                           f"{where}{miss}", tail, ")"), unit, budget=budget)


def _predicts(res: list[int]) -> str:
    """The rule's verb: the residues it names, or, where the shape lands on none of the
    lengths swept (a budget that does not divide the modulus, read per length), that no
    break is predicted there (not "predicts residues " with an empty list)."""
    return (f"predicts {residues_phrase(res)}" if res
            else "predicts no break at the lengths swept")


def _by_length(sh: Shape, lengths: Mapping[int, Iterable[int]]) -> list[int]:
    return sorted(r for r, ls in lengths.items() if any(sh.covers(int(x)) for x in ls))


def _shape_phrase(sh: Shape, source: str, load: int = 0) -> str:
    if sh.name == "budget tail":
        under = (f" ({load} background decode steps of 1 + k tokens take their share of "
                 "the budget first)" if load else "")
        return (f"the chunk budget {sh.period}{under} cuts a final chunk of L mod "
                f"{sh.period} ({sh.phases})")
    return f"hit tails mod {source} {sh.period} ({sh.phases})"


def _checked(rule, c: Mapping[str, Any], k: int, unit: int | None, budget: int | None,
             m: int) -> Prediction:
    """vLLM's own dispatch checks for a prefill: no break; on a release whose V2 runner
    sends a 1-token final chunk over existing context to the decode graph on purpose
    (``decode_graph_eligible``), the residues of those tails are named to measure."""
    why = Phrase.of("predicts no break: ", Text(rule.line()))
    if rule.mechanism != "decode_graph_eligible":
        return Prediction([], False, why)
    shapes = shapes_of(c, k, unit, budget, size=1)
    watch = sorted({r for sh in shapes for r in (sh.residues(m) or [])})
    if not watch:
        return Prediction([], False, why)
    return Prediction([], False, Phrase.of(
        why, "; but a 1-token final chunk over existing context runs as a decode step on "
        "purpose (", Code("prefill_runs_as_decode"), f"): {residues_phrase(watch)} measured, "
        "not predicted"), watch=watch, budget=budget)


def auto_modulus(c: Mapping[str, Any], longest: int | None = None) -> tuple[int, str]:
    """``--modulus auto`` from the effective geometry: the modulus at which every final
    chunk the rule names resolves (the hit unit, and the chunk budget when it cuts a
    prompt), and why."""
    k = int(c.get("draft_tokens") or 0) if c.get("method") else 0
    caching = c.get("prefix_caching") is not False
    unit = (hit_unit(c)[0] if caching else None)
    budget = chunk_budget(c, longest)
    if not unit and not budget:
        return (int(c.get("block_size") or 128),
                "the block size (no hit unit, no chunk budget below the prompt length)")
    shapes = shapes_of(c, max(k, 1), unit, budget)
    mod = 1
    for sh in shapes:
        mod = math.lcm(mod, sh.modulus)
    if budget and (not unit or mod == budget):
        why = (f"the chunk budget {budget}: a prompt of L tokens ends in a final chunk of "
               f"L mod {budget}" + ("" if not unit else f" (the hit tails, unit {unit}, repeat mod it too)"))
    elif budget:
        why = f"lcm of the hit unit {unit} and the chunk budget {budget}"
    else:
        why = f"the hit unit {unit}"
    return mod, why


def vllm_dispatch(c: Mapping[str, Any]):
    """What vLLM's own uniform-decode dispatch does on the runner this configuration ran
    on (``engine.vllm.patches.releases.dispatch_rule``), or None when that is not known:
    not vLLM, no release in the effective configuration, or neither the runner the log
    names (``model_runner``) nor a forced ``runner``. Records from before the runner was
    recorded carry neither, so their rule line is unchanged."""
    if c.get("engine") != EngineName.VLLM or not c.get("vllm_version"):
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


def hit_unit(c: Mapping[str, Any], cached_tokens: Iterable[Any] = (), *,
             default: int | None = None) -> tuple[int | None, str]:
    """THE unit prefix-cache hits come in, and where it was read from (the rule, the
    planner, the records' tail notes and the report all ask here): the match unit, else the
    hash unit the server reported, else a dense model's block size, else the measured hit
    granularity (gcd of ``cached_tokens``), else ``default`` (a caller's stand-in, e.g.
    the block size as configured), else ``(None, "")``."""
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
    if default:
        return int(default), "default"
    return None, ""
