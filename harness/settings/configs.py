"""Configurations: matrix expansion, residue selection, slots, phases, reference, prompts.

What ``harness/options.build_options`` turns the flags into for ``SweepOptions``
(``sweep_options.py``) before anything starts; a bad value raises ``UsageError`` with one
line naming the flag and what it allows. Preset resolution is ``engine.presets.resolve`` (one table for every engine).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import random
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from engine.presets import PresetError, ServingConfig, resolve

from ..judge import bugb
from ..errors import UsageError
from .flag_values import parse_phases, split
from .flags import UNSET
from ..serve.engines import adapter_class
from ..serve.slots import Slot
from ..names.engine import EngineName
from ..names.history import history_row
from ..names.reference import GOLDEN_PREFIX, MATRIX_REFERENCES, PER_ANSWER_REFERENCES
from .sweep_options import MeasurePart, SweepOptions

__all__ = ["config_id", "modulus_for", "modulus_and_why", "expand_matrix",
           "matrix_combos", "engine_refusal", "runnable",
           "predicted_residues", "select_residues", "choose_residues", "residue_choice", "ResidueChoice",
           "parse_slots", "parse_phases",
           "parse_reference", "describe"]


def config_id(cfg: ServingConfig) -> str:
    blob = json.dumps(cfg.identity(), sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def modulus_for(cfg: ServingConfig, modulus: int | None) -> int:
    """The residue modulus: given, or (auto) from the configuration's effective geometry
    (``bugb.auto_modulus``): its hit unit as configured (match unit, else block size) and,
    when ``--max-num-batched-tokens`` is set, the chunk budget that cuts a final chunk of
    ``L mod B``. A hybrid engine may hit on a coarser page block; the measured
    cached_tokens then tell, and the report says so."""
    return modulus_and_why(cfg, modulus)[0]


def modulus_and_why(cfg: ServingConfig, modulus: int | None) -> tuple[int, str]:
    """The modulus and why (records carry it as ``modulus_why``)."""
    if modulus is not None:
        return modulus, "given (--modulus)"
    mod, why = bugb.auto_modulus(cfg.as_dict())
    if not cfg.max_num_batched_tokens:
        # as before the rule knew chunk budgets: the match unit, else the block size
        mod = int(bugb.hit_unit(cfg.as_dict(), default=cfg.block_size)[0])
        why = (f"auto: the match unit {mod}" if cfg.prefix_match_unit
               else f"auto: the block size {mod}")
        return mod, why
    return mod, f"auto: {why}"


def expand_matrix(*, engine: str, model: str | None, prefix_cache: bool | None,
                  axes: dict[str, list[Any]], context: int = 4096,
                  max_tokens: int = 256) -> list[ServingConfig]:
    """Every comma-separated configuration flag is one axis (``flags.matrix_axes``); the
    result is their product, in the flags' declaration order, without duplicates."""
    return [cfg for _, cfg in matrix_combos(engine=engine, model=model,
                                            prefix_cache=prefix_cache, axes=axes,
                                            context=context, max_tokens=max_tokens)]


def matrix_combos(*, engine: str, model: str | None, prefix_cache: bool | None,
                  axes: dict[str, list[Any]], context: int = 4096, max_tokens: int = 256
                  ) -> list[tuple[dict[str, Any], ServingConfig]]:
    """``expand_matrix`` with what each configuration was resolved from: (its one value of
    every axis, the configuration), the first combination of each configuration kept
    (``sweep explain`` changes one axis of it and resolves again)."""
    names = list(axes)
    out: list[tuple[dict[str, Any], ServingConfig]] = []
    seen: set[str] = set()
    for combo in itertools.product(*(axes[n] for n in names)):
        chosen = dict(zip(names, combo))
        overrides = {n: v for n, v in chosen.items() if v is not UNSET}
        try:
            cfg = resolve(engine=engine, model=model, prefix_caching=prefix_cache, **overrides)
        except PresetError as e:
            raise UsageError(f"configuration {chosen.get('spec')}/{chosen.get('ctx')}: {e}") from None
        # what the engine cannot run (SGLang: FULL, ...) is a row of flag_checks.RULES
        cfg = history_server(cfg, context, max_tokens)
        cid = config_id(cfg)
        if cid not in seen:
            seen.add(cid)
            out.append((chosen, cfg))
    return out


def engine_refusal(cfg: ServingConfig) -> str | None:
    """What ``cfg``'s engine cannot run at all, as one line (None: it can): its adapter's
    ``config_refusal`` (SGLang: a patch set, a match unit other than its page, FULL), asked
    by a row of ``flag_checks.RULES`` for the options' configurations (``runnable``:
    explain's rungs, resolved from a parent's after its options were checked)."""
    why = adapter_class(cfg.engine).config_refusal(cfg)
    return None if why is None else f"{cfg.label()}: {why}"


def runnable(cfg: ServingConfig) -> ServingConfig:
    """``cfg``, or ``engine_refusal``'s line as a ``UsageError`` (a rung's note)."""
    if (line := engine_refusal(cfg)) is not None:
        raise UsageError(line)
    return cfg


VLLM_POOL_GROUPS = 4   # evict on vLLM: KV groups a small hybrid's pool is sized for


def history_server(cfg: ServingConfig, context: int, max_tokens: int) -> ServingConfig:
    """What a history's servers need that the sweep left unset (its ``names/history.py``
    row): abort-retry a chunk budget below the prompt, evict a small KV pool; each said in
    the configuration's notes."""
    row = history_row(cfg.history)
    changes: dict[str, Any] = {}
    notes = list(cfg.notes)
    budget = row.chunk_budget
    if row.engine_budget_share and cfg.engine != EngineName.LAB:
        blocks = int(context * row.engine_budget_share) // cfg.block_size
        budget = max(blocks, 1) * cfg.block_size
    if row.budget_prompts:
        # residue 0's templated length is --context rounded to the hash unit (each prompt
        # is padded to --context give or take half a modulus)
        unit = cfg.prefix_match_unit or cfg.block_size
        budget = row.budget_prompts * max(unit, round(context / unit) * unit)
    if budget and cfg.max_num_batched_tokens is None:
        changes["max_num_batched_tokens"] = budget
        notes.append(f"history {row.name}: --max-num-batched-tokens {budget} "
                     "(harness/names/history.py says why)")
    if row.pool_prompts and cfg.num_gpu_blocks is None:
        # vLLM's hybrid takes a block per KV group (attention and mamba) from one pool, and
        # may promote the block: room for the groups of a small hybrid; the evictors are
        # counted against the pool /metrics reports (run/history.py)
        groups = VLLM_POOL_GROUPS if cfg.engine == EngineName.VLLM else 1
        tokens = groups * row.pool_prompts * (context + max_tokens + 2 * cfg.block_size)
        changes["num_gpu_blocks"] = -(-int(tokens) // cfg.block_size)
        if cfg.engine != EngineName.LAB:
            # vLLM 0.26.0 checks --max-model-len against the overridden pool at boot
            # (v1/core/kv_cache_utils.py get_kv_cache_configs: available memory = override
            # x bytes per block): one measured prompt and its answer, not CTX's 245,760
            one = context + max_tokens + 2 * cfg.block_size
            changes["max_model_len"] = -(-one // cfg.block_size) * cfg.block_size
        notes.append(f"history {row.name}: a KV pool of {changes['num_gpu_blocks']} blocks "
                     f"(~{row.pool_prompts:g} measured prompts), so unrelated prompts evict it")
    return dataclasses.replace(cfg, **changes, notes=tuple(notes)) if changes else cfg


def predicted_residues(cfg: ServingConfig, modulus: int) -> list[int]:
    """The residues the Bug B rule (``harness.judge.bugb``) names for ``cfg`` at ``modulus``
    before anything ran ([] when it predicts no break or cannot name one)."""
    return bugb.predict(cfg.as_dict(), modulus).residues or []


@dataclass(frozen=True)
class ResidueChoice:
    """The residues one configuration is swept at, decided once (``choose_residues``): the
    modulus and why, the residues, and what was left out (None: every residue)."""

    modulus: int
    modulus_why: str | None     # None when the user gave --modulus (records say nothing)
    residues: tuple[int, ...]
    note: str | None


def residue_choice(measure: MeasurePart, cfg: ServingConfig) -> ResidueChoice:
    """``choose_residues`` for ``cfg`` with what the sweep asked to measure."""
    return choose_residues(measure.residues, cfg, measure.modulus, seed=measure.seed)


@functools.lru_cache(maxsize=256)
def choose_residues(spec: str, cfg: ServingConfig, modulus: int | None, *,
                    seed: int = 0) -> ResidueChoice:
    """The residue decision for ``cfg``: its modulus (``modulus``, or auto from the
    configuration: ``modulus_and_why``) and the residues ``spec`` selects there
    (``select_residues``). Options, ``--url``, explain's rungs, the plan and the dry run
    all ask it, so a residue spec means one thing everywhere; a bad one is a
    ``UsageError``. Decided once for each (spec, configuration, modulus, seed): every
    asker gets the same choice (``lru_cache``; a ``ResidueChoice`` cannot change)."""
    mod, why = modulus_and_why(cfg, modulus)
    residues, note = select_residues(spec, cfg, mod, seed=seed)
    return ResidueChoice(mod, why if modulus is None else None, tuple(residues), note)


def select_residues(spec: str, cfg: ServingConfig, modulus: int, *,
                    seed: int = 0) -> tuple[list[int], str | None]:
    """Residues for one configuration, and a sentence about what was left out (None when
    every residue is covered).

    ``all`` | ``risky`` (the rule's k+1 and its neighbours, plus the edges) | ``tails[:N]``
    (the final-chunk tails that matter, ``1, k, k+1, k+2``, the rule's residues, and N
    seeded others, default 4: for a large modulus such as a chunk budget) | ``LIST`` /
    ``A-B`` (each residue once, no empty item) | ``sample:N`` (always includes the rule's
    ``k + 1`` and what the rule predicts for the configuration).
    """
    s = spec.strip().lower()
    predicted = predicted_residues(cfg, modulus)
    if s == "all":
        chosen = list(range(modulus))
    elif s == "risky":
        k1 = cfg.decode_query_len
        chosen = sorted({r % modulus for r in (0, 1, k1 - 1, k1, k1 + 1, modulus - 1)})
    elif s == "tails" or s.startswith("tails:"):
        chosen = _tails(s, spec, cfg, modulus, predicted, seed)
    elif s.startswith("sample:"):
        chosen = _sample(s, spec, cfg, modulus, predicted, seed)
    else:
        chosen = _listed(spec, modulus)
    if len(chosen) == modulus:
        return chosen, None
    missing = [r for r in predicted if r not in chosen]
    miss = 1 - len(chosen) / modulus
    note = (f"{len(chosen)} of {modulus} residues swept; a single broken residue would be "
            f"missed {miss:.0%} of the time")
    if missing:
        note += f"; the rule's residue {missing[0]} (k+1) is NOT in the set"
    return chosen, note


def _sample(s: str, spec: str, cfg: ServingConfig, modulus: int, predicted: list[int],
            seed: int) -> list[int]:
    """``sample:N``: N residues, the rule's and ``k + 1`` first, the rest seeded."""
    try:
        n = int(s.split(":", 1)[1])
    except ValueError:
        raise UsageError(f"--residues: {spec!r}: sample:N needs an integer N") from None
    if not 1 <= n <= modulus:
        raise UsageError(f"--residues: sample:{n} must be between 1 and {modulus}")
    # k + 1 always (docs/flags.md), the rule's prediction or not: a configuration the
    # rule calls safe (PIECEWISE, the fix on) is checked where it would break
    must = list(dict.fromkeys([*predicted, cfg.decode_query_len % modulus]))
    rng = random.Random(seed)
    rest = [r for r in range(modulus) if r not in must]
    rng.shuffle(rest)
    return sorted(set(must[:n]) | set(rest[: max(0, n - len(must))]))


def _listed(spec: str, modulus: int) -> list[int]:
    """``LIST`` / ``A-B``: each residue once, inside the modulus, no empty item."""
    chosen: list[int] = []
    items = [v.strip() for v in spec.split(",")] if spec.strip() else []
    if "" in items:   # nothing at all is "names no residue" below
        raise UsageError(f"--residues: {spec!r} has an empty item (two commas, or one at "
                         "an end); write a list such as 3,4,5")
    for item in items:
        chosen.extend(_item(item))
    bad = [r for r in chosen if not 0 <= r < modulus]
    if bad:
        raise UsageError(f"--residues: {bad[0]} is outside 0..{modulus - 1} (modulus {modulus})")
    twice = sorted({r for r in chosen if chosen.count(r) > 1})
    if twice:
        raise UsageError(f"--residues: {spec!r} names residue {twice[0]} twice; name each "
                         "residue once")
    if not chosen:
        raise UsageError(f"--residues: {spec!r} names no residue; allowed: all, risky, "
                         "tails[:N], sample:N, a list (3,4,5) or a range (0-15)")
    return sorted(chosen)


def _item(item: str) -> list[int]:
    try:
        if "-" in item:
            a, b = (int(x) for x in item.split("-", 1))
            if a > b:
                raise UsageError(f"--residues: {item!r}: the range is reversed "
                                 f"(write {b}-{a})")
            return list(range(a, b + 1))
        return [int(item)]
    except UsageError:
        raise
    except ValueError:
        raise UsageError(f"--residues: {item!r} is not valid; allowed: all, risky, "
                         "tails[:N], sample:N, a list (3,4,5) or a range (0-15)") from None


def _tails(s: str, spec: str, cfg: ServingConfig, modulus: int, predicted: list[int],
           seed: int) -> list[int]:
    """``tails[:N]``: the residues whose final chunk is 1, k, k + 1 or k + 2 tokens, what
    the rule names, and N seeded others."""
    try:
        n = int(s.split(":", 1)[1]) if ":" in s else 4
    except ValueError:
        raise UsageError(f"--residues: {spec!r}: tails:N needs an integer N") from None
    if n < 0:
        raise UsageError(f"--residues: {spec!r}: N must be at least 0")
    k = cfg.decode_query_len - 1
    core = {r % modulus for r in (1, k, k + 1, k + 2)} | set(predicted)
    rest = [r for r in range(modulus) if r not in core]
    random.Random(f"tails:{seed}").shuffle(rest)
    return sorted(core | set(rest[:n]))


def parse_slots(slots: int | None, gpus: str | None, default: int) -> tuple[Slot, ...]:
    if gpus:
        ids = split(gpus)
        if not ids or any(not all(p.isdigit() for p in g.split("+")) for g in ids):
            raise UsageError(f"--gpus: {gpus!r} is not valid; allowed: a comma list of GPU "
                             "ids (0,1), or of groups, one tensor-parallel server each (0+1,2+3)")
        _check_groups(gpus, [g.split("+") for g in ids])
        return tuple(Slot.gpus(ids))
    n = slots if slots is not None else default
    if n < 1:
        raise UsageError("--slots must be at least 1")
    return tuple(Slot.cpu(n))


def _check_groups(spelled: str, groups: list[list[str]]) -> None:
    """Every server of a sweep spans as many GPUs (one TP size per configuration), a
    group names a GPU once, and two groups share none unless they are the same group
    (two servers side by side, as ``--gpus 0,0``)."""
    if len({len(g) for g in groups}) > 1:
        raise UsageError(f"--gpus {spelled}: every group must have as many GPUs (one "
                         "--tensor-parallel-size per sweep), e.g. 0+1,2+3")
    for g in groups:
        if len(set(g)) < len(g):
            raise UsageError(f"--gpus {spelled}: GPU {next(x for x in g if g.count(x) > 1)} "
                             f"is named twice in the group {'+'.join(g)}")
    owner: dict[str, tuple] = {}
    for g in map(tuple, groups):
        for x in g:
            if owner.setdefault(x, g) != g:
                raise UsageError(f"--gpus {spelled}: GPU {x} is in two groups "
                                 f"({'+'.join(owner[x])} and {'+'.join(g)})")


def parse_reference(reference: str, phases: Sequence[str]) -> str:
    # cold without a cold phase: flag_checks.RULES
    if reference in PER_ANSWER_REFERENCES or reference in MATRIX_REFERENCES:
        return reference
    if reference.startswith(GOLDEN_PREFIX) and len(reference) > len(GOLDEN_PREFIX):
        return reference
    raise UsageError(f"--reference: {reference!r} is not valid; allowed: passage, cold, first, "
                     "consensus, golden:RUN")


def describe(opts: SweepOptions) -> Iterable[str]:
    for cfg in opts.serving.configs:
        yield f"{config_id(cfg)}  {cfg.label()}"
        for note in cfg.notes:
            yield f"    - {note}"
        for o in cfg.overrides:
            yield f"    - override: {o}"
