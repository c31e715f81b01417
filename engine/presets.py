"""Launcher presets: the thread's SPEC / CTX / draft-token decisions as data.

One table, shared by every engine adapter (lab, vllm, cmd): ``resolve()`` turns what the
user asked for (``--spec``, ``--ctx``, ``--draft-tokens`` and any explicit override) into a
``ServingConfig``: the fully specified configuration a server is started with, plus the
reasons behind every preset decision (``notes``) and the list of fields the user forced
against the preset (``overrides``). Nothing here imports vLLM; it prints on any machine.

Each rule carries the reason it exists, because each one was paid for in the thread
(``../shared/reference/known-issues-thread.txt``).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

GiB = 1024**3

SPECS = ("mtp", "dflash2", "ngram", "none")
CTXS = ("fast", "long", "huge")
RUNNERS = ("v1", "v2", "auto")  # vLLM's model runners (engine.vllm.patches.releases)
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
# Named fixes, spelled the same for the lab engine (--patches) and the vLLM plugin
# (RESIDUE_LAB_PATCHES): one vocabulary across engines.
# the lab's fixes of the history mechanisms (engine/lab, issue 52): vLLM's plugin has no
# such patch (engine/vllm/launch.py leaves them out of its selection)
LAB_ONLY_PATCHES = ("align-publish-after-copy", "evict-group-key", "prefill-row-offsets",
                    "mamba-chunk-grid")
# the fixes vLLM's plugin has (engine/vllm/patches): what RESIDUE_LAB_PATCHES may name
VLLM_PATCHES = ("prefill-discriminator", "sliding-window-guard")
PATCHES = VLLM_PATCHES + LAB_ONLY_PATCHES

# SPEC -> (speculative method as the engines spell it, default draft tokens, why)
SPEC_TABLE: dict[str, tuple[str | None, int, str]] = {
    "mtp": ("mtp", 3, "MTP head, DRAFT_TOKENS=3 as in the thread's CTX=huge service"),
    "dflash2": ("dflash", 7, "DFlash block drafter, DFLASH_TOKENS=7 (the thread's default)"),
    "ngram": ("ngram", 3, "prompt-lookup drafter, k=3 (runs on vLLM's V1 runner)"),
    "none": (None, 0, "no speculative decoding"),
}

# CTX -> defaults. KV_MEM is pinned at huge, as in the thread (4.9 GiB free on a 24 GB card).
CTX_TABLE: dict[str, dict[str, Any]] = {
    "fast": dict(max_model_len=32_768, block_size=16, prefix_match_unit=None,
                 kv_cache_memory_bytes=None),
    "long": dict(max_model_len=131_072, block_size=16, prefix_match_unit=None,
                 kv_cache_memory_bytes=None),
    "huge": dict(max_model_len=245_760, block_size=128, prefix_match_unit=128,
                 kv_cache_memory_bytes=int(4.9 * GiB)),
}

DEFAULT_CUDAGRAPH = "FULL_AND_PIECEWISE"  # vLLM's default mode
HUGE_DRAFT_CAP_ABOVE = 7          # above this many drafts, CTX=huge caps max_model_len
HUGE_CAPPED_MAX_MODEL_LEN = 221_184  # boots at DFLASH_TOKENS=15 (245,760 needs 5.16 > 4.9 GiB)

# Fields a user may set explicitly, overriding the preset.
OVERRIDABLE = ("cudagraph_mode", "prefix_caching", "block_size", "prefix_match_unit",
               "max_model_len", "kv_cache_memory_bytes", "draft_tokens",
               "max_num_batched_tokens", "num_gpu_blocks")


class PresetError(ValueError):
    """A preset request that cannot be resolved (bad name, impossible combination)."""


@dataclass(frozen=True)
class ServingConfig:
    """Everything that defines one server (DESIGN §2 'configuration')."""

    engine: str = "lab"
    model: str | None = None
    spec: str = "mtp"
    method: str | None = "mtp"
    draft_tokens: int = 3
    ctx: str = "huge"
    cudagraph_mode: str = "PIECEWISE"
    prefix_caching: bool = True
    block_size: int = 128
    prefix_match_unit: int | None = 128
    max_model_len: int = 245_760
    kv_cache_memory_bytes: int | None = None
    patches: str = "all"
    # Model geometry: "hybrid" (recurrent state + attention, the thread's model) or
    # "dense"; None = whatever the model/engine defaults to.
    geometry: str | None = None
    # vLLM's model runner: "v1" / "v2" forced (VLLM_USE_V2_MODEL_RUNNER), "auto" = the
    # release's default. Left out of as_dict/identity when "auto", so every configuration
    # id from before the field existed is unchanged.
    runner: str = "auto"
    # The chunked-prefill token budget per step (``--max-num-batched-tokens``); None = the
    # engine's default. Left out of as_dict/identity when None (configuration ids from
    # before the field existed are unchanged).
    max_num_batched_tokens: int | None = None
    # What ran before the measured request (``--history``, harness/names/history.py), the
    # engine's asynchronous scheduling (on / off; None = the engine's default) and a KV pool
    # of this many blocks (vLLM's --num-gpu-blocks-override; the evict history's small
    # pool). Each left out of as_dict/identity at its default, as max_num_batched_tokens.
    history: str = "none"
    async_scheduling: str | None = None
    num_gpu_blocks: int | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)
    overrides: tuple[str, ...] = field(default=(), compare=False)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d.get("runner") == "auto":
            d.pop("runner")
        for name, default in _DEFAULTED:
            if d.get(name) == default:
                d.pop(name)
        return d

    def identity(self) -> dict[str, Any]:
        """The fields that define the server (not the explanations)."""
        d = self.as_dict()
        d.pop("notes")
        d.pop("overrides")
        return d

    def label(self) -> str:
        """Short human name, thread style: ``SPEC=mtp CTX=huge k=3 FULL_AND_PIECEWISE ...``."""
        parts = [f"SPEC={self.spec}", f"CTX={self.ctx}"]
        if self.method:
            parts.append(f"k={self.draft_tokens}")
        parts.append(self.cudagraph_mode)
        if self.prefix_caching:
            unit = self.prefix_match_unit if self.prefix_match_unit else "-"
            parts.append(f"block={self.block_size} unit={unit}")
        else:
            parts.append("no-prefix-cache")
        parts.append(f"patches={self.patches}")
        if self.geometry:
            parts.append(self.geometry)
        if self.runner != "auto":
            parts.append(f"runner={self.runner}")
        if self.max_num_batched_tokens:
            parts.append(f"budget={self.max_num_batched_tokens}")
        if self.num_gpu_blocks:
            parts.append(f"kv_blocks={self.num_gpu_blocks}")
        if self.async_scheduling:
            parts.append(f"async={self.async_scheduling}")
        if self.history != "none":
            parts.append(f"history={self.history}")
        return " ".join(parts)

    def speculative_config(self) -> dict[str, Any] | None:
        if not self.method:
            return None
        return {"method": self.method, "num_speculative_tokens": self.draft_tokens}

    @property
    def decode_query_len(self) -> int:
        """1 + k: the shape of a uniform (spec-verify) decode step."""
        return 1 + (self.draft_tokens if self.method else 0)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)


# fields written only away from their default (configuration ids from before them unchanged)
_DEFAULTED = (("max_num_batched_tokens", None), ("history", "none"),
              ("async_scheduling", None), ("num_gpu_blocks", None))


def normalise_patches(value: str) -> str:
    """'all' | 'none' | comma list of PATCHES, canonicalised (sorted, deduplicated)."""
    v = value.strip()
    if v in ("all", "none"):
        return v
    names = sorted({p.strip() for p in v.split(",") if p.strip()})
    bad = [n for n in names if n not in PATCHES]
    if bad or not names:
        raise PresetError(
            f"unknown patch {', '.join(bad) or repr(value)}; allowed: all, none, "
            + ", ".join(PATCHES))
    if set(names) == set(PATCHES):
        return "all"
    return ",".join(names)


GEOMETRIES = ("hybrid", "dense")


def resolve(spec: str = "mtp", ctx: str = "huge", *, engine: str = "lab",
            model: str | None = None, patches: str = "all", geometry: str | None = None,
            runner: str | None = None, history: str | None = None,
            async_scheduling: str | None = None, **overrides: Any) -> ServingConfig:
    """Resolve a preset plus explicit overrides (``None`` means 'not given').

    Returns the configuration with ``notes`` (why each preset decision was made, and
    warnings) and ``overrides`` (fields the user forced against the preset).
    """
    given = _given(spec, ctx, overrides)
    notes: list[str] = []
    method, default_k, why_spec = SPEC_TABLE[spec]
    notes.append(f"SPEC={spec}: {why_spec}")
    k = given.get("draft_tokens", default_k)
    if method is None and k:
        raise PresetError("--draft-tokens needs a speculative method (spec is 'none')")
    if method and not (1 <= int(k) <= 64):
        raise PresetError(f"draft tokens must be 1..64, got {k}")
    k = int(k) if method else 0

    preset = _preset(spec, ctx, k, given, notes)
    forced = _forced(preset, given, k, default_k)
    mode = preset["cudagraph_mode"]
    if mode not in CUDAGRAPH_MODES:
        raise PresetError(f"unknown cudagraph mode {mode!r}; allowed: {', '.join(CUDAGRAPH_MODES)}")
    if spec == "mtp" and ctx == "huge" and mode in ("FULL", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):
        notes.append(_full_graph_note(mode, k, normalise_patches(patches)))
    budget = given.get("max_num_batched_tokens")
    _check_sizes(preset, budget)
    if geometry is not None and geometry not in GEOMETRIES:
        raise PresetError(f"unknown geometry {geometry!r}; allowed: {', '.join(GEOMETRIES)}")
    runner = runner or "auto"
    if runner not in RUNNERS:
        raise PresetError(f"unknown runner {runner!r}; allowed: {', '.join(RUNNERS)}")
    unit = preset["prefix_match_unit"]
    return ServingConfig(
        engine=engine, geometry=geometry, model=model, spec=spec, method=method, draft_tokens=k, ctx=ctx,
        cudagraph_mode=mode, prefix_caching=preset["prefix_caching"],
        block_size=int(preset["block_size"]),
        prefix_match_unit=None if unit is None else int(unit),
        max_model_len=int(preset["max_model_len"]),
        kv_cache_memory_bytes=preset["kv_cache_memory_bytes"],
        patches=normalise_patches(patches), runner=runner,
        max_num_batched_tokens=None if budget is None else int(budget),
        history=history or "none", async_scheduling=async_scheduling,
        num_gpu_blocks=None if given.get("num_gpu_blocks") is None
        else int(given["num_gpu_blocks"]),
        notes=tuple(notes), overrides=tuple(forced),
    )


def _given(spec: str, ctx: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The overrides given (not None), once spec, ctx and every override's name are known."""
    if spec not in SPEC_TABLE:
        raise PresetError(f"unknown spec {spec!r}; allowed: {', '.join(SPECS)}")
    if ctx not in CTX_TABLE:
        raise PresetError(f"unknown ctx {ctx!r}; allowed: {', '.join(CTXS)}")
    unknown = set(overrides) - set(OVERRIDABLE)
    if unknown:
        raise PresetError(f"not a preset field: {', '.join(sorted(unknown))}")
    return {k: v for k, v in overrides.items() if v is not None}


def _preset(spec: str, ctx: str, k: int, given: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The preset's fields for (spec, ctx, k), each decision's why appended to ``notes``."""
    base = dict(CTX_TABLE[ctx])
    preset: dict[str, Any] = {
        "prefix_caching": True,
        "cudagraph_mode": DEFAULT_CUDAGRAPH,
        "block_size": base["block_size"],
        "prefix_match_unit": base["prefix_match_unit"],
        "max_model_len": base["max_model_len"],
        "kv_cache_memory_bytes": base["kv_cache_memory_bytes"],
    }
    if ctx == "huge":
        notes.append("CTX=huge: block 128 + --prefix-match-unit 128 with prefix caching; "
                     "KV_MEM pinned at 4.9 GiB")
    if spec == "mtp" and ctx == "huge":
        preset["cudagraph_mode"] = "PIECEWISE"
        notes.append("SPEC=mtp CTX=huge keeps PIECEWISE: a correctness constraint "
                     f"(Bug B breaks residue k+1={k + 1} under FULL_AND_PIECEWISE, 127 clean / 1 broken)")
    if ctx == "huge" and k > HUGE_DRAFT_CAP_ABOVE:
        preset["max_model_len"] = HUGE_CAPPED_MAX_MODEL_LEN
        notes.append(f"CTX=huge with {k} drafts caps max_model_len at 221,184: 245,760 needs "
                     "5.16 GiB of KV cache and 4.9 GiB is free")
    prefix_caching = bool(given.get("prefix_caching", preset["prefix_caching"]))
    if not prefix_caching and preset["prefix_match_unit"] is not None \
            and "prefix_match_unit" not in given:
        preset["prefix_match_unit"] = None
        notes.append("prefix caching off: --prefix-match-unit dropped (it only shapes cache hits)")
    preset["prefix_caching"] = prefix_caching
    return preset


def _forced(preset: dict[str, Any], given: dict[str, Any], k: int, default_k: int) -> list[str]:
    """The given fields applied to ``preset``; those that differ from it, as ``name=value
    (preset: ...)``."""
    forced: list[str] = []
    for name in ("cudagraph_mode", "block_size", "prefix_match_unit", "max_model_len",
                 "kv_cache_memory_bytes"):
        if name in given:
            value = given[name]
            if name == "prefix_match_unit" and value in (0, "none", "None"):
                value = None
            if value != preset[name]:
                forced.append(f"{name}={value} (preset: {preset[name]})")
            preset[name] = value
    if "prefix_caching" in given and given["prefix_caching"] is not True:
        forced.append("prefix_caching=False (preset: True)")
    if "draft_tokens" in given and int(given["draft_tokens"]) != default_k:
        forced.append(f"draft_tokens={k} (preset: {default_k})")
    return forced


def _full_graph_note(mode: str, k: int, patch_set: str) -> str:
    if patch_set == "all" or "prefill-discriminator" in patch_set.split(","):
        # the fix is on: a note, not a warning that the cell is corrupted
        return (f"{mode} asked for SPEC=mtp CTX=huge with the prefill-discriminator "
                f"fix on (patches={patch_set}): residue k+1={k + 1} is the cell it "
                "keeps clean on a cache hit")
    return (f"WARNING: {mode} asked for SPEC=mtp CTX=huge without the "
            f"prefill-discriminator fix (patches={patch_set}): residue "
            f"k+1={k + 1} is corrupted on a cache hit")


def _check_sizes(preset: dict[str, Any], budget: Any) -> None:
    if preset["block_size"] is not None and int(preset["block_size"]) <= 0:
        raise PresetError("block size must be positive")
    unit = preset["prefix_match_unit"]
    if unit is not None and int(unit) <= 0:
        raise PresetError("prefix match unit must be positive")
    if int(preset["max_model_len"]) <= 0:
        raise PresetError("max_model_len must be positive")
    if budget is not None and int(budget) <= 0:
        raise PresetError("max_num_batched_tokens must be positive")


def preset_table_markdown() -> str:
    """The documented preset table (docs/vllm-stack.md, `sweep presets`)."""
    rows = ["| SPEC | method | default k | why |", "|---|---|---|---|"]
    for name, (method, k, why) in SPEC_TABLE.items():
        rows.append(f"| {name} | {method or '-'} | {k} | {why} |")
    rows += ["", "| CTX | max_model_len | block | match unit | KV_MEM |", "|---|---|---|---|---|"]
    for name, d in CTX_TABLE.items():
        kv = f"{d['kv_cache_memory_bytes'] / GiB:.1f} GiB" if d["kv_cache_memory_bytes"] else "engine default"
        rows.append(f"| {name} | {d['max_model_len']:,} | {d['block_size']} | "
                    f"{d['prefix_match_unit'] or '-'} | {kv} |")
    rows += ["", "Rules: `mtp` at `huge` defaults to PIECEWISE (Bug B, correctness); above "
             f"{HUGE_DRAFT_CAP_ABOVE} drafts `huge` caps max_model_len at {HUGE_CAPPED_MAX_MODEL_LEN:,} "
             "(boot capacity); prefix caching off drops the match unit and says so."]
    return "\n".join(rows)
