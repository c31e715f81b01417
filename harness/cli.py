"""``sweep``: the command line. The only place that parses argv.

    sweep [options]                 run a residue sweep (the default verb)
    sweep report RESULTS... [-o F]  markdown report from results files / run ids
    sweep compare OLD NEW [--json]  what changed between two runs
    sweep presets                   the SPEC / CTX preset table
    sweep explain RUN [--residue R] [--phase P]   the ablation ladder of a run's non-ok cells

Exit codes: 0 every point ok (or the gate passed), 1 a point is not ok (or a regression
against --baseline), 2 usage or configuration error, 3 the sweep could not run at all,
4 the sweep ran but an output (report file, JUnit, step summary, GitHub comment) could not
be written or posted (stderr names it and the report's path), 130 interrupted (every
finished record is on disk; ``--resume RUN_ID`` continues).
Under ``--bisect`` the codes are git bisect run's (``harness.bisect``): 0 good, 1 bad,
125 untestable, 128 a usage error (abort the bisect).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Sequence

from engine.presets import preset_table_markdown

from . import bugb, interrupts, live as attached
from .bisect import internal_error, map_exit
from .backends import Backend, make_backend
from .configs import (SweepOptions, config_id, describe, expand_matrix, modulus_for,
                      parse_phases, parse_prompts, parse_reference, parse_slots,
                      select_residues)
from .engines import adapter_class, make_adapter
from .errors import (EXIT_CANNOT_RUN, EXIT_OUTPUT, CannotRun, HarnessError, OutputFailed,
                     UsageError)
from .flags import Parser, check_launch_flags, matrix_axes, positive_int, sweep_parser
from .plaintext import markdown_to_plain
from .posting import PostError, check_can_post, post_report
from .preflight import check_output_file, check_outputs
from .prompts import PlanError, TemplateError
from .ranges import fmt_ranges
from .resume import check_resumed_records, resumed_namespace
from .run.driver import Driver
from .run.plan import Point, check_golden_covers, load_golden, plan_points, plan_with_probes
from .orphans import end_orphans
from .server_pool import kill_all_servers, server_pids
from .store import (ResultStore, StoreError, linked_runs, load_manifest_for, load_records,
                    new_run_id, read_jsonl, resolve_results)

__all__ = ["EXIT_ABORT", "build_options", "run_sweep", "run_report", "run_compare",
           "run_presets", "run_explain", "SUBCOMMANDS", "main"]

EXIT_OK, EXIT_NOT_OK, EXIT_INTERRUPTED = 0, 1, 130
EXIT_ABORT = EXIT_CANNOT_RUN
DEFAULT_OUT, DEFAULT_REPORTS = "results", "reports"


def build_options(ns: argparse.Namespace, argv: Sequence[str]) -> SweepOptions:
    """Every flag validated into ``SweepOptions``; the backend checks what it needs."""
    live = attached.attach(ns, argv) if ns.url else None   # --url: a running server (harness/live.py)
    if ns.engine != "cmd" and ns.server_cmd:
        raise UsageError("--server-cmd is only for --engine cmd")
    if ns.ray_address and ns.backend != "ray":
        raise UsageError("--ray-address is only for --backend ray")
    if ns.slots and ns.gpus:
        raise UsageError("--slots and --gpus are exclusive: --gpus gives one slot per GPU")
    check_launch_flags(ns)   # --cache-dir, --launcher, --auto-sample
    seeds = tuple(ns.seed)
    if len(seeds) > 1 and ns.prompts:
        raise UsageError("--seed lists are documents and --prompts cases have none: give one --seed")
    if getattr(ns, "bisect", False) and ns.baseline:
        raise UsageError("--bisect and --baseline are exclusive: a bisect judges each build alone")
    configs = [live.cfg] if live else expand_matrix(
        engine=ns.engine, model=ns.model, prefix_cache=ns.prefix_cache, axes=matrix_axes(ns))
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
    cases = parse_prompts(ns.prompts, ns.case, reference)
    for cfg in configs:  # residue syntax errors surface now, not mid-sweep
        select_residues(ns.residues, cfg, modulus_for(cfg, modulus), seed=seeds[0])
    engine = live.adapter() if live else adapter_class(ns.engine)
    boot_timeout = ns.boot_timeout or engine.boot_timeout_s
    opts = SweepOptions(
        engine=engine.name, configs=tuple(configs), model=ns.model, residues=ns.residues,
        modulus=modulus, context=ns.context, phases=phases, reference=reference, live=live,
        isolation=ns.isolation, slots=live.slots if live else parse_slots(
            ns.slots, ns.gpus, engine.default_slots()),
        server_cmd=ns.server_cmd, served_model_name=ns.served_model_name,
        max_tokens=ns.max_tokens, timeout=ns.timeout, boot_timeout=boot_timeout,
        out=Path(ns.out or DEFAULT_OUT), reports_dir=_reports_dir(ns), resume=ns.resume,
        dry_run=ns.dry_run, answer_lines=ns.answer_lines, seed=seeds[0],
        baseline=ns.baseline, junit=Path(ns.junit) if ns.junit else None, full=ns.full,
        gh_issue=ns.gh_issue, gh_repo=ns.gh_repo, gh_dry_run=ns.gh_dry_run,
        api_key=ns.api_key, draft_model=ns.draft_model,
        engine_args=tuple(ns.engine_arg), backend=ns.backend,
        ray_address=ns.ray_address, seeds=seeds, auto_sample=ns.auto_sample,
        cache_dir=Path(ns.cache_dir) if ns.cache_dir else None, launcher=ns.launcher,
        bisect=bool(getattr(ns, "bisect", False)),
        prompts=ns.prompts, cases=cases, argv=tuple(argv), load=ns.load, load_mode=ns.load_mode,
        logprobs=engine.logprobs_default if ns.logprobs is None else ns.logprobs,
        logprobs_default=engine.logprobs_default, allow_fewer=ns.allow_fewer)
    make_backend(opts.backend).check(opts)  # e.g. ray without the extra: exit 2, now
    return opts


def _reports_dir(ns: argparse.Namespace) -> Path:
    """--reports-dir, else beside the results when --out is given, else reports/."""
    if ns.reports_dir:
        return Path(ns.reports_dir)
    return Path(ns.out) if ns.out else Path(DEFAULT_REPORTS)


# -- the sweep verb ------------------------------------------------------------------------
def run_sweep(argv: Sequence[str]) -> int:
    parser = sweep_parser()
    ns = parser.parse_args(list(argv))
    if ns.resume:
        # A resumed run is the same run: same plan, from the manifest's command line.
        store = ResultStore(ns.out or DEFAULT_OUT, ns.resume, create=False)
        try:
            manifest = store.read_manifest()
        except StoreError as e:
            raise UsageError(f"--resume: {e}") from None
        ns = resumed_namespace(ns.resume, argv, manifest)
        if Path(ns.out or DEFAULT_OUT) != store.out_dir:  # the run was found elsewhere
            ns.out = str(store.out_dir)
        argv = shlex.split(manifest["command"])[1:]
    opts = build_options(ns, argv)
    preflight_checks(opts)   # outputs, inputs, a way to post, a resumed file: before any server
    adapter = opts.live.adapter() if opts.live else make_adapter(
        opts.engine, opts.server_cmd, draft_model=opts.draft_model,
        extra_args=opts.engine_args, work_dir=opts.out, isolation=opts.isolation,
        served_model_name=opts.served_model_name, cache_dir=opts.cache_dir)
    adapter.check(opts.configs, opts.slots[0])
    for line in preset_warnings(opts):
        _say(line)
    if opts.dry_run:
        return _dry_run(opts, adapter)
    for line in end_orphans(opts.out):   # servers of an earlier run whose sweep was killed
        _say(line)
    if interrupts.pending():  # a signal whose KeyboardInterrupt a library swallowed
        raise KeyboardInterrupt
    return asyncio.run(_sweep_async(opts, adapter, make_backend(opts.backend),
                                    show_progress=not ns.no_progress))


def preflight_checks(opts: SweepOptions) -> None:
    """What the user gave that cannot work is an error now, not after the sweep."""
    check_outputs(opts)
    if opts.baseline:  # a gate that cannot be evaluated must not cost a whole sweep first
        try:
            load_records([opts.baseline], opts.out)
        except StoreError as e:
            raise UsageError(f"--baseline: {e}") from None
    check_can_post(opts.gh_issue, opts.gh_repo, opts.gh_dry_run)
    for note in check_resumed_records(opts) if opts.resume else ():
        _say(f"sweep: --resume: {note}")


def preset_warnings(opts: SweepOptions) -> list[str]:
    """The presets' warnings, said on the terminal before the sweep (the report repeats
    them under each configuration)."""
    return [f"sweep: warning: {cfg.label()}: {_plain(str(n)).removeprefix('WARNING: ')}"
            for cfg in opts.configs for n in (cfg.notes or []) if str(n).startswith("WARNING")]


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
    except PlanError as e:  # a target that cannot be hit (a prompt case, a context too big)
        raise UsageError(str(e)) from None
    total = 0
    for cfg in opts.configs:
        mod = modulus_for(cfg, opts.modulus)
        residues, note = select_residues(opts.residues, cfg, mod, seed=opts.seed)
        total += len(residues) * max(1, len(opts.cases))
        print(f"\n[{config_id(cfg)}] {cfg.label()}", file=out)
        print(f"  residues: {fmt_ranges(residues)} (mod {mod}){'  -- ' + note if note else ''}",
              file=out)
        print(f"  rule predicts: {_rule_line(cfg, mod)}", file=out)
        print(f"  server: {adapter.shell_line(cfg, opts.slots[0])}", file=out)
        if plan and opts.cases:
            for line in _case_lines(plan, config_id(cfg), opts):
                print("  " + line, file=out)
        elif plan:
            pts = [p for p in plan.points if p.cfg_id == config_id(cfg)]
            if pts:
                lens = [p.plan.target_len for p in pts]
                print(f"  templated lengths: {min(lens)}..{max(lens)} "
                      f"(padding unit {plan.pad_unit.get(config_id(cfg))!r}); e.g. rerun: "
                      f"{pts[0].rerun}", file=out)
    print(f"\n{total} data points x {len(opts.phases)} phases; nothing started (--dry-run).", file=out)
    return EXIT_OK


def _case_lines(plan, cid: str, opts: SweepOptions) -> list[str]:
    """--dry-run, --prompts: one line per case (where it pads, its lengths, what judges it)."""
    out = []
    for case in opts.cases:
        facts = plan.cases.get(case.id) or {}
        lo, hi = (facts.get("templated_len") or {}).get(cid, ("?", "?"))
        pts = [p for p in plan.points if p.cfg_id == cid and p.case == case.id]
        judged = "its expected" if case.expected is not None else f"--reference {opts.reference}"
        out.append(f"case {case.id} ({opts.prompts}:{case.line}): padding "
                   f"{(facts.get('pad_unit') or {}).get(cid)!r} in {case.describe_pad()}, "
                   f"templated lengths {lo}..{hi}, {len(pts)} points, judged by {judged}")
    if plan.points:
        out.append(f"e.g. rerun: {next(p for p in plan.points if p.cfg_id == cid).rerun}")
    return out


def _rule_line(cfg, modulus: int) -> str:
    """What the one Bug B rule (``harness.bugb``) says about ``cfg`` before it runs; on
    vLLM with the installed release and the runner it would run on (forced, or that
    release's default for this model and method)."""
    pred = bugb.predict(_with_installed_vllm(cfg.as_dict()), modulus)
    if pred.residues:
        return f"{pred.residues} ({_plain(pred.why)})"
    return f"nothing ({_plain(pred.why)})"


def _with_installed_vllm(config: dict) -> dict:
    if config.get("engine") != "vllm":
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


class _LoopInterrupts:
    """SIGINT / SIGTERM inside the sweep's event loop cancel the sweep (gracefully: servers
    killed, the manifest says interrupted); outside it ``harness.interrupts`` handles them.
    Installed before the probes boot, so an interrupt during the first boot is graceful too."""

    def __init__(self) -> None:
        self.interrupted = False
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()

    def _interrupt(self) -> None:
        self.interrupted = True
        if self._task is not None:
            self._task.cancel()

    def __enter__(self) -> "_LoopInterrupts":
        for sig in interrupts.SIGNALS:
            self._loop.add_signal_handler(sig, self._interrupt)
        if interrupts.pending():  # came before the loop took over: act on it now
            self._interrupt()
        return self

    def __exit__(self, *exc) -> None:
        for sig in interrupts.SIGNALS:
            self._loop.remove_signal_handler(sig)
        interrupts.install()   # asyncio leaves SIG_DFL for SIGTERM: death by signal


async def _sweep_async(opts: SweepOptions, adapter, backend: Backend, *,
                       show_progress: bool) -> int:
    run_id = opts.resume or new_run_id()
    with _LoopInterrupts() as sigs, server_pids(opts.out, run_id):
        try:
            return await _sweep_in_loop(opts, adapter, backend, run_id, sigs,
                                        show_progress=show_progress)
        except asyncio.CancelledError:
            if not sigs.interrupted:
                raise
            kill_all_servers()  # a probe server of the planning step
            _say(f"\ninterrupted before any data point ran (run {run_id}); no server left "
                 "running, nothing measured")
            return EXIT_INTERRUPTED


async def _sweep_in_loop(opts: SweepOptions, adapter, backend: Backend, run_id: str,
                         sigs: _LoopInterrupts, *, show_progress: bool) -> int:
    store = ResultStore(opts.out, run_id)
    try:
        golden = load_golden(opts.golden_run, opts.out) if opts.golden_run else None
    except (StoreError, CannotRun) as e:
        raise UsageError(f"--reference: {e}") from None
    try:
        plan = await plan_with_probes(opts, adapter, logs_dir=store.logs_dir)
        if golden is not None and opts.cases:
            check_golden_covers(plan, golden, opts.golden_run)
    except PlanError as e:
        raise UsageError(str(e)) from None
    launcher = await _start_launcher(opts, adapter, store, plan)
    try:
        return await _drive(opts, adapter, backend, store, plan, golden, launcher, sigs,
                            show_progress=show_progress)
    finally:
        if launcher is not None:
            launcher.close()


async def _start_launcher(opts: SweepOptions, adapter, store: ResultStore, plan):
    """--launcher prefork: the run's pre-imported parent, started before the first point."""
    from .launchers import run_launcher
    first = plan.points[0].cfg if plan.points else None
    launcher = await asyncio.to_thread(run_launcher, opts.launcher, adapter, first_cfg=first,
                                       slot=opts.slots[0], logs_dir=store.logs_dir)
    if launcher is not None:
        _say(launcher.summary())
    return launcher


async def _drive(opts: SweepOptions, adapter, backend: Backend, store: ResultStore, plan,
                 golden, launcher, sigs: _LoopInterrupts, *, show_progress: bool) -> int:
    run_id = store.run_id
    driver = Driver(opts, adapter, store, plan, golden=golden, launcher=launcher)
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

    def on_added(point: Point) -> None:
        if bar is not None:
            bar.total += 1
            bar.refresh()
        elif not show_progress:
            _say(f"  residue {point.residue}: not ok on reset, fresh confirmation added")

    driver.on_point_added = on_added
    t0 = time.monotonic()
    try:
        if sigs.interrupted:   # between the probes and here: do not start the points
            raise asyncio.CancelledError
        await backend.run(points, driver)
    except asyncio.CancelledError:
        if not sigs.interrupted:
            raise
    finally:
        kill_all_servers()
        store.close()
        if bar is not None:
            bar.close()
    wall = time.monotonic() - t0
    records = store.read()
    if opts.reference in ("first", "consensus") and not sigs.interrupted:
        from .run.matrix_reference import rejudge
        records = rejudge(records, opts.reference, [config_id(c) for c in opts.configs])
        store.rewrite(records)
    manifest = driver.finish(wall=wall, interrupted=sigs.interrupted, backend=backend.describe())
    if sigs.interrupted:
        driver.set_exit_code(EXIT_INTERRUPTED)
        _say(f"\ninterrupted: {driver.counters.points_done} points finished and on disk in "
             f"{store.records_path}; no server left running. Continue with: "
             f"sweep --resume {run_id} --out {opts.out}")
        return EXIT_INTERRUPTED
    code = _finish(opts, store, manifest, records, wall, on_disk=driver.records_on_disk)
    driver.set_exit_code(code)
    return code


def _finish(opts: SweepOptions, store: ResultStore, manifest: dict, records: list[dict],
            wall: float, *, on_disk: int = 0) -> int:
    from . import gate, report
    from .writers import WRITERS, Output
    report_md = report.render_markdown(records, [manifest], full=opts.full)
    print(markdown_to_plain(report_md))   # the terminal reads plain text; the file is markdown
    ran = f"; {on_disk} were on disk before --resume, {len(records) - on_disk} ran now"
    _say(f"\n{len(records)} records ({_counts(Counter(r['verdict'] for r in records))}) in "
         f"{wall:.1f}s{ran if opts.resume else ''}")
    _say(f"results: {store.records_path}")
    baseline = load_records([opts.baseline], opts.out) if opts.baseline else None
    losses = gate.find_coverage_losses(baseline, records) if baseline is not None else []
    out = Output(opts, store.run_id, records, manifest, report_md,
                 coverage_losses=None if opts.allow_fewer else losses)
    failed: list[str] = []
    for writer in WRITERS.values():
        if writer.wanted(opts):
            try:
                for line in writer.write(out):
                    _say(line)
            except OutputFailed as e:   # the other writers still run
                failed.append(str(e))
    if opts.bisect:
        from .bisect import bisect_exit_code, bisect_verdict_line
        for msg in failed:
            _say(f"sweep: output failed: {msg}")
        _say(bisect_verdict_line(records))
        return bisect_exit_code(records)
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
    if failed:
        for msg in failed:
            _say(f"sweep: output failed: {msg}")
        kept = (out.report_path if out.report_path.is_file()
                else f"not written; `sweep report {store.records_path} -o FILE` makes it")
        _say(f"sweep: the sweep's own verdict was exit {code}; records: "
             f"{store.records_path}; report: {kept}")
        return EXIT_OUTPUT
    return code


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
    p = Parser(prog="sweep report", description="Markdown report from results files or run "
               "ids: to -o FILE, else on stdout (plain text on a terminal, markdown when "
               "redirected).")
    p.add_argument("results", nargs="+", help="results .jsonl files or run ids")
    p.add_argument("-o", "--output", help="write the markdown to this file")
    p.add_argument("--full", action="store_true", help="do not fold clean rows")
    p.add_argument("--out", default=DEFAULT_OUT, help="where run ids are looked up")
    p.add_argument("--gh-issue", type=positive_int("--gh-issue"), metavar="N",
                   help="post the report as a comment on GitHub issue N (from -o FILE, else "
                   "from a file in the temp folder, named on stderr; gh when on PATH, else "
                   "the REST API with GITHUB_TOKEN)")
    p.add_argument("--gh-repo", metavar="OWNER/NAME", help="--gh-issue through the REST "
                   "API: the repository (default $GITHUB_REPOSITORY, else the origin remote)")
    p.add_argument("--gh-dry-run", action="store_true", help="--gh-issue: print the "
                   "request(s), post nothing")
    ns = p.parse_args(list(argv))
    from . import report
    way = check_can_post(ns.gh_issue, ns.gh_repo, ns.gh_dry_run)
    if ns.gh_issue and not ns.output:   # posted from a file: one kept where it can be found
        ns.output = str(Path(tempfile.gettempdir()) / f"residue-report-issue{ns.gh_issue}-{os.getpid()}.md")
    if ns.output:
        check_output_file("-o", Path(ns.output))
    try:  # every file checked line by line before anything is rendered or posted
        paths = [resolve_results(r, ns.out) for r in ns.results]
        records = load_records(paths)
        manifests = [m for m in (load_manifest_for(pth) for pth in paths) if m]
    except StoreError as e:
        raise UsageError(str(e)) from None
    explained = [(m, read_jsonl(p)) for m, p in linked_runs(paths, "explains")]
    if not ns.output:
        md = report.render_markdown(records, manifests, full=ns.full, explained=explained)
        print(markdown_to_plain(md) if sys.stdout.isatty() else md)
        return EXIT_OK
    try:
        path = report.write_report(records, manifests, ns.output, full=ns.full,
                                   explained=explained)
    except OSError as e:
        raise OutputFailed(f"cannot write {ns.output}: {e.strerror or e}") from None
    _say(f"report: {path}")
    if ns.gh_issue:
        try:
            for line in post_report(path, ns.gh_issue, way, dry_run=ns.gh_dry_run):
                _say(line)
        except PostError as e:
            raise OutputFailed(f"could not post the report to issue #{ns.gh_issue}: {e} "
                               f"(the report is in {path})") from None
    return EXIT_OK


def run_compare(argv: Sequence[str]) -> int:
    p = Parser(prog="sweep compare", description="What changed between two runs, per "
                "configuration and residue: fixed, regressed, still broken, newly covered.")
    p.add_argument("old", help="results file or run id (baseline)")
    p.add_argument("new", help="results file or run id")
    p.add_argument("--json", action="store_true", help="machine-readable summary on stdout")
    p.add_argument("--out", default=DEFAULT_OUT, help="where run ids are looked up")
    ns = p.parse_args(list(argv))
    from . import compare
    try:
        old = load_records([ns.old], ns.out)
        new = load_records([ns.new], ns.out)
    except StoreError as e:
        raise UsageError(str(e)) from None
    result = compare.compare_records(old, new)
    if ns.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        md = compare.render_compare_markdown(result)
        print(markdown_to_plain(md) if sys.stdout.isatty() else md)
    return EXIT_NOT_OK if result.get("regressed") else EXIT_OK


def run_presets(argv: Sequence[str]) -> int:
    Parser(prog="sweep presets", description="The SPEC / CTX preset table.").parse_args(list(argv))
    print(preset_table_markdown())
    return EXIT_OK


def run_explain(argv: Sequence[str]) -> int:
    """``sweep explain``: the ablation ladder (harness/explain_cli.py parses and prints)."""
    from .explain_cli import run_explain as run
    return run(argv, build_options)


SUBCOMMANDS = {"report": run_report, "compare": run_compare, "presets": run_presets,
               "explain": run_explain}


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
    except KeyboardInterrupt:   # a signal outside the sweep's event loop
        interrupts.ignore()
        kill_all_servers()
        print("sweep: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except Exception:   # a harness bug: re-raised; under --bisect 125 (1 is "bad"), map_exit: 2 -> 128
        code = internal_error(args, kill_all_servers)
    sys.exit(map_exit(code) if "--bisect" in args and args[0] not in SUBCOMMANDS else code)


if __name__ == "__main__":
    main()
