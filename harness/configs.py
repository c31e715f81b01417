"""Configurations: one typed sweep request, matrix expansion, residue selection.

Everything ``sweep`` was asked is validated here into ``SweepOptions`` before anything
starts; a bad value raises ``UsageError`` with one line naming the flag and what it
allows. Preset resolution is ``engine.presets.resolve`` (one table for every engine).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import random
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from engine.presets import (CUDAGRAPH_MODES, CTXS, GEOMETRIES, PATCHES, SPECS, PresetError,
                            ServingConfig, normalise_patches, resolve)

from . import bugb
from .errors import UsageError
from .server_pool import Slot
from .vocabulary import PHASES

ISOLATIONS = ("fresh", "reset", "shared")


@dataclass(frozen=True)
class SweepOptions:
    engine: str
    configs: tuple[ServingConfig, ...]
    model: str | None
    residues: str
    modulus: int | None            # None = auto (each configuration's hit granularity)
    context: int
    phases: tuple[str, ...]
    reference: str                 # passage | cold | golden:RUN
    isolation: str
    slots: tuple[Slot, ...]
    server_cmd: str | None
    served_model_name: str | None
    max_tokens: int
    timeout: float
    boot_timeout: float
    out: Path
    reports_dir: Path
    resume: str | None
    dry_run: bool
    answer_lines: int = 3
    seed: int = 0
    baseline: str | None = None
    junit: Path | None = None
    full: bool = False
    gh_issue: int | None = None
    api_key: str | None = None
    draft_model: str | None = None   # --engine vllm: drafter checkpoint
    engine_args: tuple[str, ...] = ()  # --engine vllm: extra server arguments
    backend: str = "local"         # local slots | ray (harness.backends.ray_backend)
    ray_address: str | None = None
    argv: tuple[str, ...] = field(default=(), compare=False)

    @property
    def golden_run(self) -> str | None:
        return self.reference.split(":", 1)[1] if self.reference.startswith("golden:") else None


def config_id(cfg: ServingConfig) -> str:
    blob = json.dumps(cfg.identity(), sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def modulus_for(cfg: ServingConfig, modulus: int | None) -> int:
    """The residue modulus: given, or (auto) the configuration's hit granularity as
    configured (match unit, else block size). A hybrid engine may hit on a coarser page
    block; the measured cached_tokens then tell, and the report says so."""
    if modulus is not None:
        return modulus
    return int(cfg.prefix_match_unit or cfg.block_size)


def _split(value: str | None) -> list[str]:
    if value is None:
        return []
    return [v.strip() for v in str(value).split(",") if v.strip()]


def _ints(flag: str, value: str | None, *, allow_none: bool = False) -> list[Any]:
    out: list[Any] = []
    for item in _split(value):
        if allow_none and item.lower() in ("none", "off", "0"):
            out.append(None)
            continue
        try:
            n = int(item.replace("_", ""))
        except ValueError:
            allowed = "integers or 'none'" if allow_none else "integers"
            raise UsageError(f"{flag}: {item!r} is not valid; allowed: {allowed} "
                             "(comma-separated for a matrix)") from None
        if n <= 0:
            raise UsageError(f"{flag}: {n} must be positive")
        out.append(n)
    return out


def _choices(flag: str, value: str | None, allowed: Sequence[str]) -> list[str]:
    items = _split(value)
    for item in items:
        if item not in allowed:
            raise UsageError(f"{flag}: {item!r} is not valid; allowed: {', '.join(allowed)}")
    return items


def expand_matrix(*, engine: str, model: str | None, spec: str, ctx: str,
                  draft_tokens: str | None = None, cudagraph: str | None = None,
                  prefix_cache: bool | None = None, block_size: str | None = None,
                  prefix_match_unit: str | None = None, patches: str = "all",
                  max_model_len: str | None = None, kv_cache_memory_bytes: str | None = None,
                  geometry: str | None = None) -> list[ServingConfig]:
    """Every comma-separated configuration flag is one axis; the result is the product.

    Patch sets are comma-separated too (``--patches none,all``); several named fixes in one
    set are joined with ``+`` (``--patches prefill-discriminator+sliding-window-guard``).
    """
    specs = _choices("--spec", spec, SPECS)
    ctxs = _choices("--ctx", ctx, CTXS)
    modes = _choices("--cudagraph", cudagraph, CUDAGRAPH_MODES) or [None]
    geoms = _choices("--geometry", geometry, GEOMETRIES) or [None]
    ks = _ints("--draft-tokens", draft_tokens) or [None]
    blocks = _ints("--block-size", block_size) or [None]
    units: list[Any] = _ints("--prefix-match-unit", prefix_match_unit, allow_none=True) or ["unset"]
    lens = _ints("--max-model-len", max_model_len) or [None]
    kvs = _ints("--kv-cache-memory-bytes", kv_cache_memory_bytes) or [None]
    patch_sets = []
    for item in _split(patches) or ["all"]:
        try:
            patch_sets.append(normalise_patches(item.replace("+", ",")))
        except PresetError:
            raise UsageError(f"--patches: {item!r} is not valid; allowed: all, none, or "
                             f"fixes joined by '+' from: {', '.join(PATCHES)}") from None
    out: list[ServingConfig] = []
    seen: set[str] = set()
    for s, c, m, g, k, b, u, ln, kv, p in itertools.product(
            specs, ctxs, modes, geoms, ks, blocks, units, lens, kvs, patch_sets):
        overrides = dict(cudagraph_mode=m, block_size=b, max_model_len=ln,
                         kv_cache_memory_bytes=kv, draft_tokens=k, prefix_caching=prefix_cache)
        if u != "unset":
            overrides["prefix_match_unit"] = u if u is not None else "none"
        try:
            cfg = resolve(s, c, engine=engine, model=model, patches=p, geometry=g, **overrides)
        except PresetError as e:
            raise UsageError(f"configuration {s}/{c}: {e}") from None
        cid = config_id(cfg)
        if cid not in seen:
            seen.add(cid)
            out.append(cfg)
    return out


def predicted_residues(cfg: ServingConfig, modulus: int) -> list[int]:
    """The residues the Bug B rule (``harness.bugb``) names for ``cfg`` at ``modulus``
    before anything ran ([] when it predicts no break or cannot name one)."""
    return bugb.predict(cfg.as_dict(), modulus).residues or []


def select_residues(spec: str, cfg: ServingConfig, modulus: int, *,
                    seed: int = 0) -> tuple[list[int], str | None]:
    """Residues for one configuration, and a sentence about what was left out (None when
    every residue is covered).

    ``all`` | ``risky`` (the rule's k+1 and its neighbours, plus the edges) | ``LIST`` /
    ``A-B`` | ``sample:N`` (always includes what the rule predicts for the configuration).
    """
    s = spec.strip().lower()
    predicted = predicted_residues(cfg, modulus)
    if s == "all":
        chosen = list(range(modulus))
    elif s == "risky":
        k1 = cfg.decode_query_len
        chosen = sorted({r % modulus for r in (0, 1, k1 - 1, k1, k1 + 1, modulus - 1)})
    elif s.startswith("sample:"):
        try:
            n = int(s.split(":", 1)[1])
        except ValueError:
            raise UsageError(f"--residues: {spec!r}: sample:N needs an integer N") from None
        if not 1 <= n <= modulus:
            raise UsageError(f"--residues: sample:{n} must be between 1 and {modulus}")
        rng = random.Random(seed)
        rest = [r for r in range(modulus) if r not in predicted]
        rng.shuffle(rest)
        chosen = sorted(set(predicted[:n]) | set(rest[: max(0, n - len(predicted))]))
    else:
        chosen = []
        for item in _split(spec):
            try:
                if "-" in item:
                    a, b = (int(x) for x in item.split("-", 1))
                    if a > b:
                        raise ValueError
                    chosen.extend(range(a, b + 1))
                else:
                    chosen.append(int(item))
            except ValueError:
                raise UsageError(f"--residues: {item!r} is not valid; allowed: all, risky, "
                                 "sample:N, a list (3,4,5) or a range (0-15)") from None
        bad = [r for r in chosen if not 0 <= r < modulus]
        if bad:
            raise UsageError(f"--residues: {bad[0]} is outside 0..{modulus - 1} (modulus {modulus})")
        chosen = sorted(set(chosen))
    if len(chosen) == modulus:
        return chosen, None
    missing = [r for r in predicted if r not in chosen]
    miss = 1 - len(chosen) / modulus
    note = (f"{len(chosen)} of {modulus} residues swept; a single broken residue would be "
            f"missed {miss:.0%} of the time")
    if missing:
        note += f"; the rule's residue {missing[0]} (k+1) is NOT in the set"
    return chosen, note


def parse_slots(slots: int | None, gpus: str | None, default: int) -> tuple[Slot, ...]:
    if gpus:
        ids = _split(gpus)
        if not ids or any(not g.isdigit() for g in ids):
            raise UsageError(f"--gpus: {gpus!r} is not valid; allowed: a comma list of GPU ids (0,1)")
        return tuple(Slot.gpus(ids))
    n = slots if slots is not None else default
    if n < 1:
        raise UsageError("--slots must be at least 1")
    return tuple(Slot.cpu(n))


def parse_phases(value: str) -> tuple[str, ...]:
    items = _choices("--phases", value, PHASES)
    if not items:
        raise UsageError(f"--phases: empty; allowed: {', '.join(PHASES)}")
    if len(set(items)) != len(items):
        raise UsageError(f"--phases: {value!r} names a phase twice")
    # cold is by definition the first request on the server.
    return tuple(sorted(items, key=PHASES.index))


def parse_reference(value: str, phases: Sequence[str]) -> str:
    if value in ("passage", "cold"):
        if value == "cold" and "cold" not in phases:
            raise UsageError("--reference cold needs the cold phase in --phases")
        return value
    if value.startswith("golden:") and len(value) > len("golden:"):
        return value
    raise UsageError(f"--reference: {value!r} is not valid; allowed: passage, cold, golden:RUN")


def rerun_command(opts: SweepOptions, cfg: ServingConfig, residue: int, modulus: int) -> str:
    """The one command line that reruns exactly this data point."""
    a = ["sweep", "--engine", cfg.engine]
    if opts.model:
        a += ["--model", opts.model]
    if opts.server_cmd:
        a += ["--server-cmd", opts.server_cmd]
    if opts.draft_model:
        a += ["--draft-model", opts.draft_model]
    a += [f"--engine-arg={arg}" for arg in opts.engine_args]
    a += ["--spec", cfg.spec, "--ctx", cfg.ctx]
    if cfg.method:
        a += ["--draft-tokens", str(cfg.draft_tokens)]
    a += ["--cudagraph", cfg.cudagraph_mode,
          "--prefix-cache" if cfg.prefix_caching else "--no-prefix-cache",
          "--block-size", str(cfg.block_size),
          "--prefix-match-unit", str(cfg.prefix_match_unit or "none"),
          "--max-model-len", str(cfg.max_model_len)]
    if cfg.kv_cache_memory_bytes:
        a += ["--kv-cache-memory-bytes", str(cfg.kv_cache_memory_bytes)]
    a += ["--patches", cfg.patches.replace(",", "+")]
    if cfg.geometry:
        a += ["--geometry", cfg.geometry]
    a += ["--residues", str(residue), "--modulus", str(modulus),
          "--context", str(opts.context), "--phases", ",".join(opts.phases),
          "--reference", opts.reference, "--max-tokens", str(opts.max_tokens),
          "--answer-lines", str(opts.answer_lines), "--seed", str(opts.seed),
          "--slots", "1"]
    if opts.served_model_name:
        a += ["--served-model-name", opts.served_model_name]
    return shlex.join(a)


def describe(opts: SweepOptions) -> Iterable[str]:
    for cfg in opts.configs:
        yield f"{config_id(cfg)}  {cfg.label()}"
        for note in cfg.notes:
            yield f"    - {note}"
        for o in cfg.overrides:
            yield f"    - override: {o}"
