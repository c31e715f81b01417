"""``sweep --dry-run``: the plan and each configuration's server command, nothing started;
and the presets' warnings said before a sweep.

Reads the options, the planner and the one Bug B rule (``harness.judge.bugb``); prints on stdout.
"""
from __future__ import annotations

import sys

from .names.history import history_row
from .judge import bugb
from .settings.configs import config_id, describe, residue_choice
from .settings.sweep_options import SweepOptions
from .serve.cmd_config import DECLARED_NOTE
from .errors import CannotRun, ExitCode, UsageError
from .prompts import PlanError, TemplateError
from .text.ranges import fmt_ranges
from .run.plan import plan_points
from .names.engine import EngineName
from .names.isolation import IsolationName

__all__ = ["dry_run", "preset_warnings"]


def preset_warnings(opts: SweepOptions) -> list[str]:
    """The presets' warnings, said on the terminal before the sweep (the report repeats
    them under each configuration)."""
    return [f"sweep: warning: {cfg.label()}: {_plain(str(n)).removeprefix('WARNING: ')}"
            for cfg in opts.serving.configs for n in (cfg.notes or []) if str(n).startswith("WARNING")]


def dry_run(opts: SweepOptions, adapter) -> int:
    out = sys.stdout
    print(f"engine: {opts.serving.engine}   slots: {', '.join(s.id for s in opts.running.slots)}   "
          f"isolation: {opts.running.isolation}   phases: {', '.join(opts.measure.phases)}   "
          f"reference: {opts.measure.reference}", file=out)
    print(f"configurations ({len(opts.serving.configs)}):", file=out)
    for line in describe(opts):
        print("  " + line, file=out)
    try:
        plan = plan_points(opts, adapter)
    except (CannotRun, TemplateError) as e:
        plan = None
        print(f"prompt plan: computed at run time ({e})", file=out)
    except PlanError as e:  # a target that cannot be hit (a prompt case, a context too big)
        raise UsageError(str(e)) from None
    total = 0
    for cfg in opts.serving.configs:
        chosen = residue_choice(opts.measure, cfg)
        mod, residues, note = chosen.modulus, chosen.residues, chosen.note
        total += len(residues) * max(1, len(opts.measure.cases))
        print(f"\n[{config_id(cfg)}] {cfg.label()}", file=out)
        print(f"  residues: {fmt_ranges(residues)} (mod {mod}){'  -- ' + note if note else ''}",
              file=out)
        lengths: dict[int, set[int]] = {}
        for p in (plan.points if plan else []):
            if p.cfg_id == config_id(cfg):
                lengths.setdefault(p.residue, set()).add(p.plan.target_len)
        print(f"  rule predicts: {_rule_line(cfg, mod, opts.measure.load, lengths, opts.measure.load_mode)}", file=out)
        if cfg.history != "none":   # names/history.py: what runs before, what proves it
            row = history_row(cfg.history)
            print(f"  history {row.name} (at {row.at}): {row.before}; proven by {row.proof}; "
                  f"the rule under it: {row.rule}", file=out)
        print(f"  server: {adapter.shell_line(cfg, opts.running.slots[0])}", file=out)
        restoring = adapter.for_isolation("restore") if opts.running.isolation == IsolationName.AUTO else adapter
        if restoring is not adapter:   # auto's restore pass starts its servers in sleep mode
            print(f"  server (restore pass): {restoring.shell_line(cfg, opts.running.slots[0])}",
                  file=out)
        if plan and opts.measure.cases:
            for line in _case_lines(plan, config_id(cfg), opts):
                print("  " + line, file=out)
        elif plan:
            pts = [p for p in plan.points if p.cfg_id == config_id(cfg)]
            if pts:
                lens = [p.plan.target_len for p in pts]
                print(f"  templated lengths: {min(lens)}..{max(lens)} "
                      f"(padding unit {plan.pad_unit.get(config_id(cfg))!r}); e.g. rerun: "
                      f"{pts[0].rerun}", file=out)
    print(f"\n{total} data points x {len(opts.measure.phases)} phases; nothing started (--dry-run).", file=out)
    return ExitCode.OK


def _case_lines(plan, cid: str, opts: SweepOptions) -> list[str]:
    """--dry-run, --prompts: one line per case (where it pads, its lengths, what judges it)."""
    out = []
    for case in opts.measure.cases:
        facts = plan.cases.get(case.id) or {}
        lo, hi = (facts.get("templated_len") or {}).get(cid, ("?", "?"))
        pts = [p for p in plan.points if p.cfg_id == cid and p.case == case.id]
        judged = "its expected" if case.expected is not None else f"--reference {opts.measure.reference}"
        out.append(f"case {case.id} ({opts.measure.prompts}:{case.line}): padding "
                   f"{(facts.get('pad_unit') or {}).get(cid)!r} in {case.describe_pad()}, "
                   f"templated lengths {lo}..{hi}, {len(pts)} points, judged by {judged}")
    if plan.points:
        out.append(f"e.g. rerun: {next(p for p in plan.points if p.cfg_id == cid).rerun}")
    return out


def _rule_line(cfg, modulus: int, load: int = 0,
               lengths: dict[int, set[int]] | None = None, load_mode: str = "steady") -> str:
    """What the one Bug B rule (``harness.judge.bugb``) says about ``cfg`` before it runs; on
    vLLM with the installed release and the runner it would run on (forced, or that
    release's default for this model and method); under ``--load`` with the planned
    lengths (the budget left beside the background decodes), and under ``--load-mode
    cancel`` per measured request, not per residue."""
    if cfg.engine == EngineName.CMD and DECLARED_NOTE not in cfg.notes:
        return ("cannot be checked before the server runs (--engine cmd: what it runs is "
                "read from the server after boot, or declared with --served-config)")
    pred = bugb.predict(_with_installed_vllm(cfg.as_dict()), modulus, load=load,
                        load_mode=load_mode, lengths=lengths if load else None)
    if pred.residues:
        return f"{pred.residues} ({pred.reason.plain()})"
    if pred.per_batch:
        return f"per measured request ({pred.reason.plain()})"
    return f"nothing ({pred.reason.plain()})"


def _with_installed_vllm(config: dict) -> dict:
    if config.get("engine") != EngineName.VLLM:
        return config
    from importlib.metadata import PackageNotFoundError, version
    from engine.vllm.patches.releases import default_runner
    try:
        release = version("vllm")
    except PackageNotFoundError:
        return config   # nothing installed to ask about: the rule without the release
    runner = config.get("runner")
    if runner not in ("v1", "v2"):
        try:
            runner = default_runner(release, config.get("method") or "none",
                                    hybrid=config.get("geometry") != "dense")
        except ValueError:
            return config
    return {**config, "vllm_version": release, "runner": runner}


def _plain(markdown: str) -> str:
    return markdown.replace("`", "").replace("\\", "")
