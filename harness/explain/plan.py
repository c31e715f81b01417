"""``sweep explain``: why a cell is what it is, by the thread's ablation ladder.

For each non-ok cell of a finished run (or the one named), the residue is rerun on fresh
servers once unchanged (does it reproduce?) and once per axis with only that axis changed
(history, graph mode, patches, prefix caching, match unit, spec, block size, k ± 1, vLLM's
model runner), resolved again from the typed values the parent resolved the cell from
(``settings/configs.matrix_combos``), as ``sweep`` would; nothing is parsed again. All rungs of all cells are one linked run:
one ``Driver``, one backend, records in the same store, and a manifest whose ``explains``
block names the parent run and, per cell, which configuration ran which rung."""
from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine.presets import ServingConfig

from ..settings.configs import config_id, expand_matrix, matrix_combos, residue_choice, runnable
from ..settings.sweep_options import SweepOptions
from ..names.reference import MATRIX_REFERENCES
from ..serve.cmd_config import declare
from ..errors import CannotRun, ExitCode, HarnessError, StoreError, UsageError
from ..settings.flag_manifest import namespace_of
from ..settings.flags import UNSET, matrix_axes
from ..options import build_options
from ..report.explained import EXPLAINED, UNCHANGED
from ..run.plan import SweepPlan, plan_with_probes
from ..records.phase_record import PhaseRecord
from ..records.recordkeys import document_of, latest_records
from ..records.manifest import RunManifest
from ..records.store import ResultStore, read_jsonl_records, resolve_results, run_manifest_for
from ..residue_sweep import Sweep
from ..names.engine import EngineName
from ..names.phase import phase_key
from ..names.verdict import CLEAN, worst

__all__ = ["ExplainPlan", "Target", "RungSpec", "ExplainSweep", "prepare", "ladder_options",
           "axis_changes", "non_ok_cells", "parent_golden", "check_resume",
           "unexplained_cells", "HYBRID_BLOCK_NOTE"]


@dataclass
class RungSpec:
    label: str                       # "graph mode → PIECEWISE"
    axis: str                        # "graph mode"
    opts: SweepOptions | None        # None: not applicable (note says why)
    note: str = ""

    @property
    def cfg(self) -> ServingConfig | None:
        return self.opts.serving.configs[0] if self.opts else None

    def manifest_entry(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "axis": self.axis}
        if self.opts:
            out["config_id"] = config_id(self.cfg)
            out["config_label"] = self.cfg.label()
        else:
            out["note"] = self.note
        return out


@dataclass
class Target:
    config_id: str
    config_label: str
    residue: int
    phases: dict[str, str]           # explained phase -> the parent's verdict
    rungs: list[RungSpec] = field(default_factory=list)
    document: int = 0                # the document seed of the cell
    case_id: str | None = None       # --prompts: the case of the cell

    def manifest_entry(self) -> dict[str, Any]:
        out = {"config_id": self.config_id, "config_label": self.config_label,
               "residue": self.residue, "document": self.document, "phases": self.phases,
               "rungs": [r.manifest_entry() for r in self.rungs]}
        if self.case_id is not None:
            out["case_id"] = self.case_id
        return out


EXPLAIN_PARALLEL_BOOTS = 4   # rung servers booting at once (a cold GPU: each compiles)


@dataclass
class ExplainPlan:
    parent_run: str
    parent_path: Path
    targets: list[Target]
    argv: tuple[str, ...]
    parent_reference: str = "passage"
    parent_documents: tuple[int, ...] = ()
    parallel_boots: int = EXPLAIN_PARALLEL_BOOTS   # rung servers booting at once
    # the parent's not-ok cells explain does not rerun (boot-fail, invalid, unjudged, ...):
    # verdict -> cells; with no target, these decide what explain says
    unexplained: dict[str, int] = field(default_factory=dict)

    def runnable(self) -> list[RungSpec]:
        return [r for t in self.targets for r in t.rungs if r.opts is not None]


# -- the axes ------------------------------------------------------------------------------
# (axis, label, changes): the values the configuration is resolved from (the typed matrix
# axes, settings/configs.matrix_combos; PREFIX_CACHE: prefix caching itself), one axis
# changed; a change that leaves the configuration as it is is not run.
PREFIX_CACHE = "prefix_cache"
Change = tuple[str, str, "dict[str, Any] | str"]   # a str: why the rung is not run
# vLLM (v1/core/kv_cache_utils.py, resolve_kv_cache_block_sizes): with several KV groups
# (the hybrid) the match unit is the hash block, and every group's block size must be
# divisible by it; the hybrid's attention block is raised to fit the mamba page (block 16
# became 160 on the H200, vLLM 0.26.0: "Invalid prefix_match_unit=128"), so the rung
# cannot boot, and the match-unit rung already moves the hit unit.
HYBRID_BLOCK_NOTE = ("on a hybrid with a prefix-match unit the unit is the hit "
                     "unit and vLLM requires every KV group's block to be divisible by it "
                     "(block 16 became a 160-token attention block and did not boot on "
                     "vLLM 0.26.0); the match-unit rung moves the hit unit instead")


def axis_changes(cfg: ServingConfig, *, runners: tuple[str, ...] = (),
                 ran_on: str | None = None) -> list[Change]:
    """The one-axis changes of ``cfg`` the ladder tries, in the thread's order.
    ``runners``: the model runners the engine can be forced onto (vLLM: v1, v2); the
    one ``ran_on`` (the effective runner of the cell) is left out."""
    out: list[Change] = [
        ("graph mode", "graph mode → PIECEWISE", {"cudagraph_mode": "PIECEWISE"}),
        ("patches", "patches → all", {"patches": "all"}),
        ("prefix caching", "prefix caching → off", {PREFIX_CACHE: False,
                                                     "prefix_match_unit": UNSET}),
        ("match unit", "match unit → none", {"prefix_match_unit": "none"}),
        ("spec", "spec → none", {"spec": "none", "draft_tokens": None}),
        ("block size", "block size → 16", {"block_size": 16}
         if not _vllm_hybrid_with_unit(cfg) else HYBRID_BLOCK_NOTE),
    ]
    if cfg.history != "none":   # a fresh server's request (the history's budget, pool go too)
        out.insert(0, ("history", "history → none", {"history": "none"}))
    if cfg.max_num_batched_tokens:
        # the chunk budget cuts a final chunk of L mod B (docs/shapes.md): without it the
        # prompt is one chunk (at the engine's default budget)
        out.append(("chunk budget", f"chunk budget {cfg.max_num_batched_tokens} → the "
                    "engine's default", {"max_num_batched_tokens": None}))
    if cfg.method:
        k = int(cfg.draft_tokens)
        out += [("k", f"k → {k2}", {"draft_tokens": k2}) for k2 in (k - 1, k + 1) if k2 >= 1]
    for r in runners:
        if r != ran_on:
            out.append(("runner", f"runner → {r}", {"runner": r}
                        if not _v2_refuses(cfg, r) else V2_NGRAM_NOTE))
    return out


# vLLM's Model Runner V2 refuses n-gram drafting at config validation (0.26.0 on the H200,
# 2026-12-03: "Model Runner V2 does not yet support: ngram/ngram_gpu speculative decoding",
# both boots of the rung): the rung measures nothing there.
V2_NGRAM_NOTE = ("vLLM's Model Runner V2 refuses n-gram speculative decoding "
                 "(0.26.0: \"Model Runner V2 does not yet support: ngram/ngram_gpu "
                 "speculative decoding\")")


def _v2_refuses(cfg: ServingConfig, runner: str) -> bool:
    return cfg.engine == EngineName.VLLM and runner == "v2" and cfg.method == "ngram"


def _vllm_hybrid_with_unit(cfg: ServingConfig) -> bool:
    """vLLM refuses block 16 here (``HYBRID_BLOCK_NOTE``); the lab's hybrid runs it."""
    return cfg.engine == EngineName.VLLM and cfg.geometry == "hybrid" and bool(cfg.prefix_match_unit)


def _rung_opts(run: SweepOptions, parent_ns, chosen: dict, changes: dict) -> SweepOptions:
    """One rung: the cell's run on its configuration resolved again from the values the
    parent resolved it from (``chosen``: typed matrix axes) with ``changes`` over them."""
    axes = {**chosen, **changes}
    prefix_cache = axes.pop(PREFIX_CACHE, parent_ns.prefix_cache)
    m = run.measure
    (cfg,) = expand_matrix(engine=parent_ns.engine, model=parent_ns.model, context=m.context,
                           prefix_cache=prefix_cache, axes={k: [v] for k, v in axes.items()},
                           max_tokens=m.max_tokens)
    cfg = declare(runnable(cfg), run.serving.served_fields)   # past RULES: refused, a note
    residue_choice(m, cfg)   # a rung's residues checked on its configuration
    return run.replace(configs=(cfg,))


def _chosen_for(combos: list[tuple[dict, ServingConfig]], served: dict | None,
                cid: str) -> dict | None:
    """The parent's typed matrix axes that resolve to ``cid`` (None: no longer built)."""
    return next((chosen for chosen, cfg in combos
                 if config_id(declare(cfg, served)) == cid), None)


def _run_opts(parent_ns, residue: int, modulus: int | None,
              run_flags: dict[str, Any]) -> SweepOptions:
    """The parent's flags with explain's run flags over them, at one residue (validated
    once by ``build_options``)."""
    ns = argparse.Namespace(**{**vars(parent_ns), **run_flags, "residues": "0"})  # any modulus
    if modulus is not None:
        ns.modulus = str(modulus)
    opts = build_options(ns, ["explain-rung"], written={})   # a rung's flags are its ns
    return opts.replace(residues=str(residue))


# -- which cells ---------------------------------------------------------------------------
CellKey = tuple[str, str | None, int, int]   # (config_id, case, residue, document)


def non_ok_cells(records: list[PhaseRecord], residue: int | None,
                 phase: str | None) -> dict[CellKey, dict[str, Any]]:
    """The cells explain reruns, keyed (config_id, case, residue, document):
    {"phases": {phase: verdict}, "record": one ``PhaseRecord``}. Only a judged bad answer, a crash
    or a timeout (``EXPLAINED``) is explained: an unjudged, boot-fail or invalid cell has
    nothing in its answer to explain. An auto run's reset and fresh records of one cell
    merge (explain reruns on fresh servers either way), the worse verdict kept."""
    recs, _ = latest_records(records)
    out: dict[CellKey, dict[str, Any]] = {}
    # residue, then document, then phase: the ladders come out in one order whatever order
    # the points finished in (two slots finish documents 0 and 1 either way round)
    for r in sorted(recs, key=lambda r: (r.residue, document_of(r), phase_key(r.phase))):
        if r.verdict not in EXPLAINED:
            continue
        if residue is not None and r.residue != residue:
            continue
        if phase is not None and r.phase != phase:
            continue
        key = (r.config_id, r.case_id, int(r.residue), document_of(r))
        cell = out.setdefault(key, {"phases": {}, "record": r})
        seen = cell["phases"]
        seen[r.phase] = worst([r.verdict, *([seen[r.phase]] if r.phase in seen else [])])
    return out


def prepare(run_ref: str, out_dir: str, *, residue: int | None, phase: str | None,
            run_flags: dict[str, Any], runners_for: Callable[[str], tuple[str, ...]]) -> ExplainPlan:
    """Read the parent run, pick its non-ok cells and build every rung's options.

    ``run_flags``: the explain invocation's own run flags (slots, gpus, out, ...) put over
    the parent's; ``runners_for(engine)``: the runners a
    ``--runner`` rung may force on that engine."""
    try:
        path = resolve_results(run_ref, out_dir)
        manifest = run_manifest_for(path)
    except StoreError as e:
        raise UsageError(str(e)) from None
    if not manifest or not (manifest.options or manifest.command):
        raise UsageError(f"{run_ref}: no run manifest with its options or command line "
                         f"beside {path}")
    if manifest.explains:
        raise UsageError(f"{run_ref} is itself an explain run; explain its parent "
                         f"{manifest.explained_run}")
    parent_ns, _ = namespace_of(manifest, f"explain {run_ref}")   # its options, else its command line
    if getattr(parent_ns, "serve", None):   # a rung changes a flag; the line has them all
        raise UsageError(f"sweep explain {run_ref}: the run swept a --serve line, whose "
                         "configuration only the line changes; rerun the line with one "
                         "change at a time (docs/serve.md)")
    try:
        parent_records = read_jsonl_records(path)
        cells = non_ok_cells(parent_records, residue, phase)
        unexplained = unexplained_cells(parent_records)
    except ValueError as e:   # a record the model refuses (an unknown verdict or phase)
        raise UsageError(f"{path}: {e}") from None
    if not cells and (residue is not None or phase is not None):
        what = " ".join(x for x in (f"residue {residue}" if residue is not None else "",
                                    f"phase {phase}" if phase else "") if x)
        raise UsageError(f"run {manifest.run_id}: no broken, diverged, crash or timeout "
                         f"cell at {what} (no non-ok cell to explain)")
    combos = matrix_combos(engine=parent_ns.engine, model=parent_ns.model,   # resolved once
                           prefix_cache=parent_ns.prefix_cache, axes=matrix_axes(parent_ns),
                           context=parent_ns.context, max_tokens=parent_ns.max_tokens)
    targets = [_target(manifest.run_id, parent_ns, combos, key, cell, run_flags, runners_for)
               for key, cell in cells.items()]
    return ExplainPlan(manifest.run_id, path, targets, ("explain", str(run_ref)),
                       manifest.reference or parent_ns.reference,
                       tuple(manifest.documents or ()),
                       unexplained=unexplained)


def _target(run_id: str, parent_ns, combos: list, key: CellKey, cell: dict[str, Any],
            run_flags: dict[str, Any], runners_for: Callable[[str], tuple[str, ...]]) -> Target:
    """One explained cell: its unchanged rung and one rung per axis."""
    cid, case, res, doc = key
    rec = cell["record"]
    requested = dict(rec.requested_config or rec.config or {})
    # every rung measures the same prompt: a budget rung would otherwise change what
    # --modulus auto resolves to, and so the length behind the residue
    pin = (rec.modulus if requested.get("max_num_batched_tokens")
           and parent_ns.modulus == "auto" else None)
    run = _run_opts(parent_ns, res, pin, run_flags)
    chosen = _chosen_for(combos, run.serving.served_fields, cid)
    if chosen is None:
        raise CannotRun(f"run {run_id}: the command line no longer builds configuration "
                        f"{cid} ({rec.config_label}); was it made by another harness version?")
    base = _rung_opts(run, parent_ns, chosen, {})
    t = Target(cid, rec.config_label or base.serving.configs[0].label(), res,
               cell["phases"], [RungSpec(UNCHANGED, UNCHANGED, base)], doc, case)
    for change in axis_changes(base.serving.configs[0], runners=runners_for(base.serving.engine),
                               ran_on=(rec.config or {}).get("model_runner")):
        t.rungs.append(_rung(run, parent_ns, chosen, change, cid))
    return t


def check_resume(xp: ExplainPlan, run_id: str, out_dir: str) -> None:
    """``sweep explain PARENT --resume RUN``: RUN is an explain run of PARENT whose cells
    and rungs are the ones rebuilt now (the same ``--residue`` / ``--phase``), else a
    usage error naming what differs."""
    try:
        manifest = run_manifest_for(resolve_results(run_id, out_dir)) or RunManifest()
    except StoreError as e:
        raise UsageError(f"--resume {run_id}: {e}") from None
    parent = manifest.explained_run   # set: manifest.explains is an ExplainsLink
    if parent != xp.parent_run:
        raise UsageError(f"--resume {run_id}: not an explain run of {xp.parent_run}"
                         + (f" (it explains {parent})" if parent else ""))
    then = [(t.config_id, t.residue, t.document) for t in manifest.explains.targets or ()]
    now = [(t.config_id, t.residue, t.document) for t in xp.targets]
    if then != now:
        raise UsageError(f"--resume {run_id}: it explained other cells ({len(then)}) than "
                         f"this command picks ({len(now)}): give the same --residue/--phase")


def unexplained_cells(records: list[PhaseRecord]) -> dict[str, int]:
    """verdict -> how many of the run's latest cells have it, for the not-ok verdicts explain
    does not rerun (nothing in their answer to explain: boot-fail, invalid, infra, unjudged)."""
    recs, _ = latest_records(records)
    out = Counter(r.verdict for r in recs if r.verdict not in CLEAN | EXPLAINED)
    return dict(sorted(out.items()))


def _rung(run: SweepOptions, parent_ns, chosen: dict, change: Change, base_cid: str
          ) -> RungSpec:
    axis, label, changes = change
    if isinstance(changes, str):
        return RungSpec(label, axis, None, changes)
    try:
        opts = _rung_opts(run, parent_ns, chosen, changes)
    except HarnessError as e:   # e.g. k-1 outside the preset's range, a residue past the modulus
        if e.exit_code is None:   # handled where it is raised (HandledError): here, a bug
            raise
        return RungSpec(label, axis, None, str(e))
    if config_id(opts.serving.configs[0]) == base_cid:
        return RungSpec(label, axis, None, "the cell already runs with it")
    return RungSpec(label, axis, opts)


# -- running the rungs ---------------------------------------------------------------------
def ladder_options(xp: ExplainPlan) -> SweepOptions:
    """One run's options for every runnable rung of every cell: the first rung's run
    flags (slots, out, launcher, cache dir, reference, ...), every rung's configuration."""
    rungs = xp.runnable()
    configs: dict[str, ServingConfig] = {}
    for r in rungs:
        configs.setdefault(config_id(r.cfg), r.cfg)
    residues = sorted({t.residue for t in xp.targets})
    # every rung is another configuration, on a GPU each a compile: one boot alone first
    # (it warms the shared caches), then a few at once (backends/local.BootGate)
    first = rungs[0].opts
    opts = first.replace(configs=tuple(configs.values()), argv=xp.argv,
                         residues=",".join(map(str, residues)), boot_warmup=True,
                         boot_parallel=min(len(first.running.slots), xp.parallel_boots))
    if opts.measure.reference in MATRIX_REFERENCES:
        # first / consensus judge a run's answers against each other after it ends; a rung
        # is one configuration, so it is judged against the answer the parent's matrix
        # reference chose for the same prompt (ExplainSweep.golden; else every clean rung
        # stays unjudged)
        opts = opts.replace(reference=f"golden:{xp.parent_run}")
    return opts


class ExplainSweep(Sweep):
    """The ladder as one linked run through the sweep's own lifecycle (``Sweep``): the
    same launcher, signals, golden answers, manifest and writers; what differs is the plan
    (each cell's residue on its rungs' configurations), the reference under a first /
    consensus parent (the parent's own matrix reference), the manifest's ``explains`` link,
    the report (the ladders) and the exit code (0: the ladder ran; what it shows is the
    answer, a reproduced cell is not a failure of ``explain``)."""

    def __init__(self, xp: ExplainPlan, *, resume: str | None = None, **kw: Any) -> None:
        opts = ladder_options(xp)
        if resume:   # the same ladder: the points on disk are not run again
            opts = opts.replace(resume=resume)
        super().__init__(opts, **kw)
        self.xp = xp

    def continue_line(self, run_id: str) -> str:
        return (f"sweep explain {self.xp.parent_run} --resume {run_id} "
                f"--out {self.options.outputs.out}")

    async def plan(self, store: ResultStore) -> SweepPlan:
        return await _plan(self.xp, self.options, self.adapter, store, self.servers.launcher())

    def golden(self) -> dict[tuple, Any] | None:
        if self.xp.parent_reference in MATRIX_REFERENCES:
            return parent_golden(read_jsonl_records(self.xp.parent_path))
        return super().golden()

    def links(self) -> dict[str, Any]:
        xp = self.xp
        return {"explains": {"run_id": xp.parent_run, "results": str(xp.parent_path),
                             "documents": list(xp.parent_documents),
                             "targets": [t.manifest_entry() for t in xp.targets]}}

    def render(self, records: list[PhaseRecord], manifest: RunManifest) -> str:
        from ..report.explained import ladders, render_ladder
        return "\n\n".join(render_ladder(lad, "##") for lad in ladders(manifest, records))

    def judge(self, records: list[PhaseRecord], block, cb) -> int:
        return ExitCode.OK


async def _plan(xp: ExplainPlan, opts: SweepOptions, adapter, store: ResultStore,
                launcher) -> SweepPlan:
    """One plan per explained cell (its residue, document and case, its rungs'
    configurations), merged; a point two cells share runs once. Probe servers start
    through ``launcher`` (the sweep's ``ServerGroup``)."""
    points, seen, pad, t0 = [], set(), {}, time.monotonic()
    for t in xp.targets:
        cfgs: dict[str, ServingConfig] = {}
        for r in t.rungs:
            if r.opts is not None:
                cfgs.setdefault(config_id(r.cfg), r.cfg)
        cases = tuple(c for c in opts.measure.cases if c.id == t.case_id)
        sub = opts.replace(configs=tuple(cfgs.values()), residues=str(t.residue),
                           documents=(t.document,), seed=t.document, cases=cases)
        p = await plan_with_probes(sub, adapter, logs_dir=store.logs_dir, launcher=launcher)
        pad.update(p.pad_unit)
        for pt in p.points:
            if pt.key not in seen:
                seen.add(pt.key)
                points.append(pt)
    return SweepPlan(points, {}, time.monotonic() - t0, pad)


def parent_golden(records: list[PhaseRecord]) -> dict[tuple, dict]:
    """``run.golden.load_golden``'s mapping from a first / consensus run's own records: per
    prompt, the reference answer its matrix reference judged the prompt's answers against
    (text and token logprobs of an answer with that sha1); a prompt judged against more
    than one answer, or none, is left out."""
    recs, _ = latest_records(records)
    by_sha = {r.sha1: r for r in recs if r.sha1}
    refs: dict[tuple, set[str]] = {}
    for r in recs:
        if r.reference_sha1 in by_sha:
            key = (("prompt", r.prompt_sha1) if r.prompt_sha1
                   else (r.residue, r.target_len, r.document_seed))
            refs.setdefault(key, set()).add(r.reference_sha1)
    out = {}
    for key, shas in refs.items():
        if len(shas) == 1:
            ref = by_sha[next(iter(shas))]
            out[key] = {"text": ref.answer or "", "sha1": ref.sha1, "tokens": ref.token_logprobs}
    return out
