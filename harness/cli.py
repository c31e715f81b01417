"""``sweep``: the command line. The only place that parses argv.

    sweep [options]                 run a residue sweep (the default verb)
    sweep report RESULTS... [-o F]  markdown report from results files / run ids
    sweep compare OLD NEW [--json]  what changed between two runs
    sweep presets                   the SPEC / CTX preset table

Exit codes: 0 every point ok (or the gate passed), 1 a point is not ok (or a regression
against --baseline), 2 usage or configuration error, 3 the sweep could not run at all,
130 interrupted (every finished record is on disk; ``--resume RUN_ID`` continues).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Sequence

from engine.presets import preset_table_markdown

from . import bugb
from .backends import Backend, make_backend
from .configs import (SweepOptions, config_id, describe, expand_matrix, modulus_for,
                      parse_phases, parse_reference, parse_slots, select_residues)
from .engines import adapter_class, make_adapter
from .errors import EXIT_CANNOT_RUN, CannotRun, HarnessError, UsageError
from .flags import Parser, matrix_axes, positive_int, sweep_parser
from .prompts import PlanError, TemplateError
from .ranges import fmt_ranges
from .run.driver import Driver
from .run.plan import Point, load_golden, plan_points, plan_with_probes
from .server_pool import kill_all_servers
from .store import (ResultStore, StoreError, load_manifest_for, load_records, new_run_id,
                    resolve_results)

__all__ = ["EXIT_ABORT", "build_options", "run_sweep", "run_report", "run_compare",
           "run_presets", "SUBCOMMANDS", "main"]

EXIT_OK, EXIT_NOT_OK, EXIT_INTERRUPTED = 0, 1, 130
EXIT_ABORT = EXIT_CANNOT_RUN


def build_options(ns: argparse.Namespace, argv: Sequence[str]) -> SweepOptions:
    """Every flag validated into ``SweepOptions``; the backend checks what it needs."""
    if ns.engine != "cmd" and ns.server_cmd:
        raise UsageError("--server-cmd is only for --engine cmd")
    if ns.ray_address and ns.backend != "ray":
        raise UsageError("--ray-address is only for --backend ray")
    if ns.slots and ns.gpus:
        raise UsageError("--slots and --gpus are exclusive: --gpus gives one slot per GPU")
    configs = expand_matrix(engine=ns.engine, model=ns.model, prefix_cache=ns.prefix_cache,
                            axes=matrix_axes(ns))
    if ns.modulus == "auto":
        modulus = None
    else:
        try:
            modulus = int(ns.modulus)
        except ValueError:
            raise UsageError(f"--modulus: {ns.modulus!r} is not valid; allowed: a positive integer or auto") from None
        if modulus < 1:
            raise UsageError("--modulus must be at least 1")
    phases = parse_phases(ns.phases)
    reference = parse_reference(ns.reference, phases)
    for cfg in configs:  # residue syntax errors surface now, not mid-sweep
        select_residues(ns.residues, cfg, modulus_for(cfg, modulus), seed=ns.seed)
    engine = adapter_class(ns.engine)
    boot_timeout = ns.boot_timeout or engine.boot_timeout_s
    opts = SweepOptions(
        engine=ns.engine, configs=tuple(configs), model=ns.model, residues=ns.residues,
        modulus=modulus, context=ns.context, phases=phases, reference=reference,
        isolation=ns.isolation, slots=parse_slots(ns.slots, ns.gpus, engine.default_slots()),
        server_cmd=ns.server_cmd, served_model_name=ns.served_model_name,
        max_tokens=ns.max_tokens, timeout=ns.timeout, boot_timeout=boot_timeout,
        out=Path(ns.out), reports_dir=Path(ns.reports_dir), resume=ns.resume,
        dry_run=ns.dry_run, answer_lines=ns.answer_lines, seed=ns.seed,
        baseline=ns.baseline, junit=Path(ns.junit) if ns.junit else None, full=ns.full,
        gh_issue=ns.gh_issue, api_key=ns.api_key, draft_model=ns.draft_model,
        engine_args=tuple(ns.engine_arg), backend=ns.backend,
        ray_address=ns.ray_address, argv=tuple(argv),
        logprobs=engine.logprobs_default if ns.logprobs is None else ns.logprobs,
        logprobs_default=engine.logprobs_default, allow_fewer=ns.allow_fewer)
    make_backend(opts.backend).check(opts)  # e.g. ray without the extra: exit 2, now
    return opts


# -- the sweep verb ------------------------------------------------------------------------
def run_sweep(argv: Sequence[str]) -> int:
    parser = sweep_parser()
    ns = parser.parse_args(list(argv))
    resume_id = ns.resume
    if resume_id:
        # A resumed run is the same run: same plan, from the manifest's command line.
        store = ResultStore(ns.out, resume_id)
        try:
            manifest = store.read_manifest()
        except StoreError as e:
            raise UsageError(f"--resume: {e}") from None
        argv = [a for a in shlex.split(manifest["command"])[1:]]
        ns = parser.parse_args(argv)
        ns.resume = resume_id
    opts = build_options(ns, argv)
    adapter = make_adapter(opts.engine, opts.server_cmd, draft_model=opts.draft_model,
                           extra_args=opts.engine_args, work_dir=opts.out,
                           isolation=opts.isolation, served_model_name=opts.served_model_name)
    adapter.check(opts.configs, opts.slots[0])
    if opts.dry_run:
        return _dry_run(opts, adapter)
    return asyncio.run(_sweep_async(opts, adapter, make_backend(opts.backend),
                                    show_progress=not ns.no_progress))


def _dry_run(opts: SweepOptions, adapter) -> int:
    out = sys.stdout
    print(f"engine: {opts.engine}   slots: {', '.join(s.id for s in opts.slots)}   "
          f"isolation: {opts.isolation}   phases: {', '.join(opts.phases)}   "
          f"reference: {opts.reference}", file=out)
    print(f"configurations ({len(opts.configs)}):", file=out)
    for line in describe(opts):
        print("  " + line, file=out)
    try:
        plan = plan_points(opts, adapter)
    except (CannotRun, TemplateError) as e:
        plan = None
        print(f"prompt plan: computed at run time ({e})", file=out)
    total = 0
    for cfg in opts.configs:
        mod = modulus_for(cfg, opts.modulus)
        residues, note = select_residues(opts.residues, cfg, mod, seed=opts.seed)
        total += len(residues)
        print(f"\n[{config_id(cfg)}] {cfg.label()}", file=out)
        print(f"  residues: {fmt_ranges(residues)} (mod {mod}){'  -- ' + note if note else ''}",
              file=out)
        print(f"  rule predicts: {_rule_line(cfg, mod)}", file=out)
        print(f"  server: {adapter.shell_line(cfg, opts.slots[0])}", file=out)
        if plan:
            pts = [p for p in plan.points if p.cfg_id == config_id(cfg)]
            if pts:
                lens = [p.plan.target_len for p in pts]
                print(f"  templated lengths: {min(lens)}..{max(lens)} "
                      f"(padding unit {plan.pad_unit.get(config_id(cfg))!r}); e.g. rerun: "
                      f"{pts[0].rerun}", file=out)
    print(f"\n{total} data points x {len(opts.phases)} phases; nothing started (--dry-run).", file=out)
    return EXIT_OK


def _rule_line(cfg, modulus: int) -> str:
    """What the one Bug B rule (``harness.bugb``) says about ``cfg`` before it runs."""
    pred = bugb.predict(cfg.as_dict(), modulus)
    if pred.residues:
        return f"{pred.residues} ({_plain(pred.why)})"
    return f"nothing ({_plain(pred.why)})"


def _plain(markdown: str) -> str:
    return markdown.replace("`", "").replace("\\", "")


async def _sweep_async(opts: SweepOptions, adapter, backend: Backend, *,
                       show_progress: bool) -> int:
    run_id = opts.resume or new_run_id()
    if opts.baseline:  # a gate that cannot be evaluated must not cost a whole sweep first
        try:
            resolve_results(opts.baseline, opts.out)
        except StoreError as e:
            raise UsageError(f"--baseline: {e}") from None
    store = ResultStore(opts.out, run_id)
    try:
        golden = load_golden(opts.golden_run, opts.out) if opts.golden_run else None
    except (StoreError, CannotRun) as e:
        raise UsageError(f"--reference: {e}") from None
    try:
        plan = await plan_with_probes(opts, adapter, logs_dir=store.logs_dir)
    except PlanError as e:
        raise UsageError(str(e)) from None
    driver = Driver(opts, adapter, store, plan, golden=golden)
    points = driver.start()
    if opts.resume:
        _say(f"resuming {run_id}: {driver.resumed} points already complete, {len(points)} to run")
    slots_said = ("the Ray cluster's slots" if opts.backend == "ray"
                  else f"{len(opts.slots)} slot(s)")
    _say(f"run {run_id}: {len(plan.points)} data points x {len(opts.phases)} phases over "
         f"{len(opts.configs)} configuration(s), {slots_said}, isolation "
         f"{opts.isolation}; records -> {store.records_path}")
    for cid, note in plan.sampled.items():
        if note:
            _say(f"  sampled ({cid}): {note}")

    bar = _progress(len(points), show_progress)

    def on_point(point: Point, records: list[dict]) -> None:
        bad = [r for r in records if r["verdict"] != "ok"]
        if bad and not show_progress:
            _say(f"  residue {point.residue}: " + ", ".join(f"{r['phase']} {r['verdict']}" for r in bad))
        if bar is not None:
            bar.set_postfix_str(_counts(driver.counters.verdicts), refresh=False)
            bar.update(1)

    driver.on_point_done = on_point
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    interrupted = False

    def _interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        if main_task is not None:
            main_task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _interrupt)
    t0 = time.monotonic()
    try:
        await backend.run(points, driver)
    except asyncio.CancelledError:
        if not interrupted:
            raise
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        kill_all_servers()
        store.close()
        if bar is not None:
            bar.close()
    wall = time.monotonic() - t0
    records = store.read()
    if opts.reference in ("first", "consensus") and not interrupted:
        from .run.matrix_reference import rejudge
        records = rejudge(records, opts.reference, [config_id(c) for c in opts.configs])
        store.rewrite(records)
    manifest = driver.finish(wall=wall, interrupted=interrupted, backend=backend.describe())
    if interrupted:
        driver.set_exit_code(EXIT_INTERRUPTED)
        _say(f"\ninterrupted: {driver.counters.points_done} points finished and on disk in "
             f"{store.records_path}; no server left running. Continue with: "
             f"sweep --resume {run_id} --out {opts.out}")
        return EXIT_INTERRUPTED
    code = _finish(opts, store, manifest, records, wall)
    driver.set_exit_code(code)
    return code


def _finish(opts: SweepOptions, store: ResultStore, manifest: dict, records: list[dict],
            wall: float) -> int:
    from . import gate, report
    from .writers import WRITERS, Output
    report_md = report.render_markdown(records, [manifest], full=opts.full)
    print(report_md)
    counts = _counts(_verdict_counter(records))
    _say(f"\n{len(records)} records ({counts}) in {wall:.1f}s")
    _say(f"results: {store.records_path}")
    baseline = load_records([opts.baseline], opts.out) if opts.baseline else None
    losses = gate.find_coverage_losses(baseline, records) if baseline is not None else []
    out = Output(opts, store.run_id, records, manifest, report_md,
                 coverage_losses=None if opts.allow_fewer else losses)
    for writer in WRITERS.values():
        if writer.wanted(opts):
            for line in writer.write(out):
                _say(line)
    code = gate.gate_exit_code(records, baseline, allow_fewer=opts.allow_fewer)
    if baseline is not None:
        regs = gate.find_regressions(baseline, records)
        _say(f"gate: {len(regs)} regression(s) against {opts.baseline}")
        if losses:
            _say(f"gate: {len(losses)} cell(s) the baseline judged are missing or unjudged "
                 f"now{' (allowed: --allow-fewer)' if opts.allow_fewer else ''}:")
            for loss in losses[:20]:
                _say(f"  coverage: {gate.coverage_line(loss)}")
            if len(losses) > 20:
                _say(f"  ... and {len(losses) - 20} more")
    return code


def _verdict_counter(records: list[dict]):
    from collections import Counter
    return Counter(r["verdict"] for r in records)


def _counts(counter) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(counter.items())) or "-"


def _progress(total: int, enabled: bool):
    """A tqdm bar on a terminal; in a log (CI, nohup) tqdm prints one line every 30 s
    instead of a carriage-return animation."""
    if not enabled or total == 0:
        return None
    from tqdm import tqdm
    tty = sys.stderr.isatty()
    return tqdm(total=total, unit="pt", file=sys.stderr, dynamic_ncols=tty, ncols=None if tty else 100,
                mininterval=0.3 if tty else 30.0, maxinterval=30.0 if not tty else 10.0,
                desc="sweep", ascii=not tty)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- sub-verbs -----------------------------------------------------------------------------
def run_report(argv: Sequence[str]) -> int:
    p = Parser(prog="sweep report", description="Markdown report from results files or run ids.")
    p.add_argument("results", nargs="+", help="results .jsonl files or run ids")
    p.add_argument("-o", "--output", help="write the markdown to this file")
    p.add_argument("--full", action="store_true", help="do not fold clean rows")
    p.add_argument("--out", default="results", help="where run ids are looked up")
    p.add_argument("--gh-issue", type=positive_int("--gh-issue"), metavar="N",
                   help="post the report as a comment on GitHub issue N (needs gh)")
    ns = p.parse_args(list(argv))
    from . import gate, report
    try:
        paths = [resolve_results(r, ns.out) for r in ns.results]
    except StoreError as e:
        raise UsageError(str(e)) from None
    records = load_records(paths)
    manifests = [m for m in (load_manifest_for(pth) for pth in paths) if m]
    md = report.render_markdown(records, manifests, full=ns.full)
    if ns.output:
        path = report.write_report(records, manifests, ns.output, full=ns.full)
        _say(f"report: {path}")
    else:
        print(md)
    if ns.gh_issue:
        if not ns.output:
            raise UsageError("--gh-issue needs -o FILE (gh posts a file)")
        try:
            gate.post_issue_comment(ns.output, ns.gh_issue)
        except gate.GateError as e:
            print(f"sweep: could not post the report: {e}", file=sys.stderr)
            return EXIT_ABORT
    return EXIT_OK


def run_compare(argv: Sequence[str]) -> int:
    p = Parser(prog="sweep compare", description="What changed between two runs, per "
                "configuration and residue: fixed, regressed, still broken, newly covered.")
    p.add_argument("old", help="results file or run id (baseline)")
    p.add_argument("new", help="results file or run id")
    p.add_argument("--json", action="store_true", help="machine-readable summary on stdout")
    p.add_argument("--out", default="results", help="where run ids are looked up")
    ns = p.parse_args(list(argv))
    from . import compare
    try:
        old = load_records([ns.old], ns.out)
        new = load_records([ns.new], ns.out)
    except StoreError as e:
        raise UsageError(str(e)) from None
    result = compare.compare_records(old, new)
    print(json.dumps(result, indent=2, sort_keys=True) if ns.json
          else compare.render_compare_markdown(result))
    return EXIT_NOT_OK if result.get("regressed") else EXIT_OK


def run_presets(argv: Sequence[str]) -> int:
    Parser(prog="sweep presets", description="The SPEC / CTX preset table.").parse_args(list(argv))
    print(preset_table_markdown())
    return EXIT_OK


SUBCOMMANDS = {"report": run_report, "compare": run_compare, "presets": run_presets}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in SUBCOMMANDS:
            code = SUBCOMMANDS[args[0]](args[1:])
        else:
            code = run_sweep(args)
    except HarnessError as e:
        print(f"sweep: {e.prefix}: {e}", file=sys.stderr)
        code = e.exit_code
    except (TemplateError, StoreError) as e:
        print(f"sweep: cannot run: {e}", file=sys.stderr)
        code = EXIT_CANNOT_RUN
    except BrokenPipeError:  # `sweep ... | head`
        sys.stderr.close()
        code = EXIT_OK
    except KeyboardInterrupt:
        kill_all_servers()
        print("sweep: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    sys.exit(code)


if __name__ == "__main__":
    main()
