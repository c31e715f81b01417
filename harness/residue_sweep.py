"""One sweep from its first server to its exit code: ``Sweep(options, adapter, backend)``.

Every way of running a sweep goes through this one lifecycle: the command line
(``sweep``, ``--resume``, ``--bisect``), ``sweep explain`` (``explain/plan.ExplainSweep``
changes only its plan, its manifest links, its report and its exit code) and a Python
caller (a test suite: ``from harness import Sweep, options_from_argv``):

    results store -> golden answers -> plan (probe servers) -> launcher -> Driver + backend
    -> SIGINT / SIGTERM: cancelled, servers killed, manifest says interrupted
    -> rejudged under ``--reference first`` / ``consensus`` -> manifest finished
    -> report -> output writers -> exit code (the gate's, or git bisect's under --bisect)

``Sweep.run`` returns a ``RunResult`` (records, manifest, report, exit code, the cells
that are not ok). What cannot start raises a ``HarnessError`` (``UsageError``: exit 2,
``CannotRun``: exit 3) before any data point; a data point that fails is a record with
a verdict, never an exception. ``Callbacks`` is how the caller hears about progress (the
CLI: status lines on stderr, a progress bar, the report on stdout); by default a sweep
says nothing.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import interrupts
from .backends import Backend, make_backend
from .settings.sweep_options import SweepOptions
from .serve.engines import EngineAdapter, make_adapter
from .errors import CannotRun, ExitCode, OutputFailed, UsageError
from .publish.posting import check_can_post
from .publish.preflight import check_outputs
from .prompts import PlanError, TemplateError
from .run.driver import Driver
from .run.live import connect, live_adapter
from .run.golden import check_golden_covers, load_golden
from .run.plan import Point, SweepPlan, plan_with_probes
from .records.gate_block import BaselineBlock
from .records.phase_record import PhaseRecord
from .records.recordkeys import latest_records
from .serve.orphans import end_orphans
from .run.resume import check_resumed_records
from .server_pool import Observer, ServerGroup, server_pids
from .records.manifest import RunManifest
from .records.store import ResultStore, StoreError, load_records, new_run_id, run_lock
from .names.verdict import CLEAN
from .text.phrase import plural

__all__ = ["Sweep", "RunResult", "Callbacks", "adapter_for"]


def adapter_for(opts: SweepOptions) -> EngineAdapter:
    """The engine adapter ``opts`` asks for (every run builds it this one way); ``--url``:
    the running server's (harness/run/live.py)."""
    if opts.running.live:
        return live_adapter(opts.running.live)
    s = opts.serving
    serve = s.serve_line   # --serve: the line, as the options read it
    adapter = make_adapter(s.engine, s.server_cmd, draft_model=s.draft_model,
                           extra_args=s.engine_args, work_dir=opts.outputs.out,
                           isolation=opts.running.isolation, served_model_name=s.served_model_name
                           or (serve.served_model_name if serve else None),
                           served_config=s.served_fields, cache_dir=s.cache_dir,
                           poison=s.poison)
    adapter.serve = serve
    if serve is not None and serve.has("--worker-extension-cls"):
        adapter.poison = False   # the line's own extension (vLLM loads one): --poison auto off
    return adapter


def _unread(opts: SweepOptions) -> bool:
    """A ``--url`` sweep whose server the session has not read yet."""
    return opts.running.live is not None and opts.running.live.cfg is None


class Callbacks:
    """What a running sweep tells its caller; each method's default says nothing."""

    def say(self, line: str) -> None:
        """A status line (what started, where the records go, an output written)."""

    def started(self, run_id: str, points: int) -> None:
        """The points are about to run (``points``: how many, resumed ones left out)."""

    def point_done(self, point: Point, records: list[PhaseRecord], verdicts: Counter) -> None:
        """A point finished (``verdicts``: the run's counts so far)."""

    def point_added(self, point: Point) -> None:
        """The backend added a point while running (an auto run's fresh confirmation)."""

    def stopped(self) -> None:
        """No point runs any more (finished or interrupted)."""

    def report(self, markdown: str) -> None:
        """The finished run's report (before the output writers run)."""

    def finished(self, result: "RunResult") -> None:
        """The finished run, for a caller that shows its own view of the report (the
        terminal's short one); by default ``report`` with the markdown."""
        self.report(result.report_markdown)


@dataclass
class RunResult:
    """A finished (or interrupted) sweep as its caller sees it."""
    run_id: str
    exit_code: int
    records: list[PhaseRecord] = field(default_factory=list)
    manifest: RunManifest = field(default_factory=RunManifest)
    records_path: Path | None = None
    report_markdown: str = ""
    report_path: Path | None = None        # the report file, when it was written
    interrupted: bool = False
    failed_outputs: list[str] = field(default_factory=list)
    dry_run: bool = False                  # --dry-run: the plan only (report_markdown)

    @property
    def not_ok(self) -> list[PhaseRecord]:
        """The latest record of every cell whose verdict is not ``ok``."""
        latest, _ = latest_records(self.records)
        return [r for r in latest if r.verdict not in CLEAN]


class Sweep:
    """One sweep: ``Sweep(options).run()`` -> ``RunResult``.

    ``adapter`` and ``backend`` default to the ones ``options`` names. ``signals``: take
    SIGINT / SIGTERM while the points run (on the main thread only) and end the run as
    interrupted (exit 130, every finished record kept, ``--resume`` continues it).
    ``observers``: called with ("started" | "stopped", server) for each server this sweep
    starts or stops (the run's pid file is one more); ``servers`` is the sweep's own group,
    so two sweeps in one process never see, list or stop each other's servers."""

    def __init__(self, options: SweepOptions, adapter: EngineAdapter | None = None,
                 backend: Backend | None = None, *, signals: bool = True,
                 observers: tuple[Observer, ...] = ()) -> None:
        self.options = options
        self.adapter = adapter
        if adapter is None and not _unread(options):   # --url: once read (check)
            self.adapter = adapter_for(options)
        self.backend = backend if backend is not None else make_backend(options.running.backend)
        self.signals = signals
        self.servers = ServerGroup(observers)
        self._checked = False
        self._baseline: list[PhaseRecord] = []   # --baseline's records, read once by check()
        self._held = contextlib.ExitStack()   # the run's lock (store.run_lock) while it runs
        self._locked = False

    # -- before any server -------------------------------------------------------------
    def check(self) -> list[str]:
        """What the user gave that cannot work is a ``UsageError`` now, not after the
        sweep: outputs writable, the baseline readable, a way to post, a resumed results
        file whole, the engine's checks. Returns what is worth saying (a torn last line of a
        resumed file cut off)."""
        self._connect()
        opts = self.options
        check_outputs(opts)
        if opts.outputs.baseline:  # a gate that cannot be evaluated must not cost a whole sweep
            read = opts.outputs.baseline_records   # read once, as the options were built
            try:   # else here (options built by hand; unreadable: said now, exit 2)
                self._baseline = (list(read) if read is not None else
                                  load_records([opts.outputs.baseline], opts.outputs.out))
            except StoreError as e:
                raise UsageError(f"--baseline: {e}") from None
        check_can_post(opts.outputs.gh_issue, opts.outputs.gh_repo, opts.outputs.gh_dry_run)
        if opts.running.resume and not opts.running.dry_run:   # before its file is read, let alone cut
            self._lock(opts.running.resume)
        try:
            notes = [f"sweep: warning: {n}" for n in opts.flag_notes]   # RULES' warns rows
            notes += ([f"sweep: --resume: {n}" for n in check_resumed_records(opts)]
                      if opts.running.resume else [])
            self.adapter.check(opts.serving.configs, opts.running.slots[0])
        except BaseException:
            self._held.close()
            self._locked = False
            raise
        self._checked = True
        return notes

    def _connect(self) -> None:
        """``--url``: read the running server now (options never send a request): the
        options get its configuration, the sweep its adapter (harness/run/live.py)."""
        if _unread(self.options):
            self.options = connect(self.options)
            self.adapter = adapter_for(self.options)

    # -- the steps a kind of run may change (explain/plan.ExplainSweep) ------------------
    async def plan(self, store: ResultStore) -> SweepPlan:
        """The data points, with probe servers where the prompt length needs them."""
        return await plan_with_probes(self.options, self.adapter, logs_dir=store.logs_dir,
                                      launcher=self.servers.launcher())

    def golden(self) -> dict[tuple, Any] | None:
        """The reference answers of ``--reference golden:RUN`` (None without one)."""
        opts = self.options
        return load_golden(opts.measure.golden_run, opts.outputs.out) if opts.measure.golden_run else None

    def links(self) -> dict[str, Any]:
        """Blocks the manifest carries about other runs (explain: its parent)."""
        return {}

    def render(self, records: list[PhaseRecord], manifest: RunManifest) -> str:
        """The finished run's report, as markdown."""
        from . import report
        return report.render_markdown(records, [manifest], full=self.options.outputs.full)

    def judge(self, records: list[PhaseRecord], block: BaselineBlock | None,
              cb: Callbacks) -> int:
        """The run's own exit code: git bisect's under ``--bisect``, else the gate's (against
        ``--baseline``: the verdict ``block`` carries, decided by ``gate.gate_block``)."""
        from .publish import gate
        opts = self.options
        if opts.outputs.bisect:
            from .publish.bisect import bisect_exit_code, bisect_verdict_line
            cb.say(bisect_verdict_line(records))
            return bisect_exit_code(records)
        return gate.gate_exit_code(records, block=block)

    # -- the lifecycle -----------------------------------------------------------------
    def run(self, callbacks: Callbacks | None = None) -> RunResult:
        """Run the sweep to its end in a new event loop."""
        return asyncio.run(self.run_async(callbacks))

    async def run_async(self, callbacks: Callbacks | None = None) -> RunResult:
        """``run`` inside a running event loop."""
        cb = callbacks or Callbacks()
        if not self._checked:
            for note in self.check():
                cb.say(note)
        try:
            if self.options.running.dry_run:   # the plan and the server commands, nothing started
                return self._dry_run(cb)
            self.adapter.check_can_start()   # e.g. vLLM not installed: exit 3, nothing started
            for line in end_orphans(self.options.outputs.out):  # servers of an earlier run whose sweep was killed
                cb.say(line)
            run_id = self.options.running.resume or new_run_id()
            self._lock(run_id)   # a --resume took it in check(), before reading the file
            with interrupts.LoopSignals(self.signals) as sigs, \
                    server_pids(self.options.outputs.out, run_id, self.servers):
                try:
                    return await self._planned(run_id, sigs, cb)
                except asyncio.CancelledError:
                    if not sigs.interrupted:
                        raise
                    self.servers.kill_all()  # a probe server of the planning step
                    cb.say(f"\ninterrupted before any data point ran (run {run_id}); "
                           f"{self._servers_left()}, nothing measured")
                    return RunResult(run_id, ExitCode.INTERRUPTED, interrupted=True)
        finally:
            self._held.close()   # the run's lock, taken here or in check()
            self._locked = False

    def _lock(self, run_id: str) -> None:
        """Hold ``run_id``'s lock until the run ends (``UsageError`` while another process
        runs it: ``sweep --resume`` of a run still going)."""
        if not self._locked:
            self._held.enter_context(run_lock(self.options.outputs.out, run_id))
            self._locked = True

    def _dry_run(self, cb: Callbacks) -> RunResult:
        """``--dry-run`` from Python (the API, the pytest plugin) as on the command line:
        no server, no orphan reaping, no records; the plan text is the result's report."""
        import io

        from .dryrun import dry_run
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            code = dry_run(self.options, self.adapter)
        cb.report(text.getvalue())
        return RunResult("", code, report_markdown=text.getvalue(), dry_run=True)

    async def _planned(self, run_id: str, sigs: interrupts.LoopSignals, cb: Callbacks) -> RunResult:
        opts = self.options
        store = ResultStore(opts.outputs.out, run_id)
        try:
            golden = self.golden()
        except (StoreError, CannotRun) as e:
            raise UsageError(f"--reference: {e}") from None
        try:
            plan = await self.plan(store)
            if golden is not None:   # every case covered, some prompt shared
                check_golden_covers(plan, golden, opts.measure.golden_run)
        except PlanError as e:
            raise UsageError(str(e)) from None
        except TemplateError as e:   # the shared planner's (engine/prompts): no tokenizer
            raise CannotRun(str(e)) from None
        launcher = await self._start_launcher(store, plan, cb)
        try:
            return await self._drive(store, plan, golden, launcher, sigs, cb)
        finally:
            if launcher is not None:
                launcher.close()

    async def _start_launcher(self, store: ResultStore, plan: SweepPlan, cb: Callbacks):
        """--launcher prefork: the run's pre-imported parent, started before the first point."""
        from .run.launchers import run_launcher
        opts = self.options
        first = plan.points[0].cfg if plan.points else None
        launcher = await asyncio.to_thread(run_launcher, opts.serving.launcher, self.adapter,
                                           first_cfg=first, slot=opts.running.slots[0],
                                           logs_dir=store.logs_dir)
        if launcher is not None:
            cb.say(launcher.summary())
        return launcher

    async def _drive(self, store: ResultStore, plan: SweepPlan, golden, launcher,
                     sigs: interrupts.LoopSignals, cb: Callbacks) -> RunResult:
        opts = self.options
        driver = Driver(opts, self.adapter, store, plan, golden=golden, launcher=launcher,
                        links=self.links(), servers=self.servers)
        points = driver.start()
        self._say_start(driver, plan, len(points), cb)
        driver.on_point_done = lambda p, recs: cb.point_done(p, recs, driver.counters.verdicts)
        driver.on_point_added = cb.point_added
        cb.started(store.run_id, len(points))
        t0 = time.monotonic()
        try:
            if sigs.interrupted:   # between the probes and here: do not start the points
                raise asyncio.CancelledError
            await self.backend.run(points, driver)
        except asyncio.CancelledError:
            if not sigs.interrupted:
                raise
        finally:
            self.servers.kill_all()
            driver.close()
            cb.stopped()
        wall = time.monotonic() - t0
        records = driver.final_records(judge=not sigs.interrupted)
        manifest = driver.finish(wall=wall, interrupted=sigs.interrupted,
                                 backend=self.backend.describe())
        result = RunResult(store.run_id, ExitCode.INTERRUPTED, records, manifest,
                           store.records_path, interrupted=sigs.interrupted)
        if sigs.interrupted:
            self._report_interrupted(result, cb)
            cb.say(f"\ninterrupted: {driver.counters.points_done} points finished and on disk "
                   f"in {store.records_path}; {self._servers_left()}. "
                   + (f"Continue with: {self.continue_line(store.run_id)}" if not opts.running.live
                      else "A --url run is not resumed: sweep the server again as a new run"))
        else:
            self._finish(result, wall, cb, driver.records_on_disk)
        driver.set_exit_code(int(result.exit_code))
        return result

    def _report_interrupted(self, result: RunResult, cb: Callbacks) -> None:
        """An interrupted run's ``.md`` report as well as its records: what is on disk,
        rendered, the title's line saying the run did not finish (report/interrupted.py).
        The markdown writer only: no gate, JUnit or posting of a run that did not end."""
        from .publish.writers import MarkdownWriter, Output
        if not result.records:
            return
        result.report_markdown = self.render(result.records, result.manifest)
        out = Output(self.options, result.run_id, result.records, result.manifest,
                     result.report_markdown)
        try:
            for line in MarkdownWriter().write(out):
                cb.say(line)
        except OutputFailed as e:
            result.failed_outputs.append(str(e))
            cb.say(f"sweep: output failed: {e}")
            return
        result.report_path = out.report_path

    def _servers_left(self) -> str:
        """What an interrupted run left running: nothing of its own; a ``--url`` server is
        not the sweep's to stop (docs/live.md)."""
        if self.options.running.live:
            return (f"the server at {self.options.running.live.url} was not started by this sweep "
                    "and is left running")
        return "no server left running"

    def continue_line(self, run_id: str) -> str:
        """The command that continues this run after an interruption."""
        return f"sweep --resume {run_id} --out {self.options.outputs.out}"

    def _say_start(self, driver: Driver, plan: SweepPlan, to_run: int, cb: Callbacks) -> None:
        opts, run_id = self.options, driver.run_id
        if opts.running.resume:
            cb.say(f"resuming {run_id}: {driver.resumed} points already complete, "
                   f"{to_run} to run")
        slots_said = ("the Ray cluster's slots" if opts.running.backend == "ray"
                      else plural(len(opts.running.slots), "slot"))
        # two lines: the records path alone on the second (a 120-column terminal, issue 50)
        cb.say(f"run {run_id}: {plural(len(plan.points), 'data point')} x "
               f"{plural(len(opts.measure.phases), 'phase')} over "
               f"{plural(len(opts.serving.configs), 'configuration')}, {slots_said}, isolation "
               f"{opts.running.isolation}\n  records -> {driver.store.records_path}")
        for cid, note in plan.sampled.items():
            if note:
                cb.say(f"  sampled ({cid}): {note}")

    def _finish(self, result: RunResult, wall: float, cb: Callbacks, on_disk: int) -> None:
        """Report, output writers, exit code: a failed writer does not stop the others."""
        from .publish import gate
        from .publish.writers import WRITERS, Output
        opts, records = self.options, result.records
        block = None
        if opts.outputs.baseline and not opts.outputs.bisect:  # the report's baseline section reads it
            block = gate.gate_block(self._baseline, records, source=opts.outputs.baseline,
                                    allow_fewer=opts.outputs.allow_fewer)
            result.manifest.baseline = block
        result.report_markdown = self.render(records, result.manifest)
        cb.finished(result)
        counts = " ".join(f"{k}={v}" for k, v in sorted(
            Counter(r.verdict for r in records).items())) or "-"
        ran = (f"; {on_disk} were on disk before --resume, {len(records) - on_disk} ran now"
               if opts.running.resume else "")
        cb.say(f"\n{len(records)} records ({counts}) in {wall:.1f}s{ran}")
        cb.say(f"results: {result.records_path}")
        out = Output(opts, result.run_id, records, result.manifest, result.report_markdown,
                     gate=block)
        for writer in WRITERS.values():
            if writer.wanted(opts):
                try:
                    for line in writer.write(out):
                        cb.say(line)
                except OutputFailed as e:   # the other writers still run
                    result.failed_outputs.append(str(e))
        if out.report_path.is_file():
            result.report_path = out.report_path
        if opts.outputs.bisect:
            for msg in result.failed_outputs:
                cb.say(f"sweep: output failed: {msg}")
        code = self.judge(records, block, cb)
        if block is not None:   # the cells themselves: the terminal report, the report file
            cb.say(gate.gate_summary(block))
        if result.failed_outputs and not opts.outputs.bisect:
            for msg in result.failed_outputs:
                cb.say(f"sweep: output failed: {msg}")
            kept = (result.report_path or f"not written; `sweep report {result.records_path} "
                    "-o FILE` makes it")
            cb.say(f"sweep: the sweep's own verdict was exit {code}; records: "
                   f"{result.records_path}; report: {kept}")
            code = ExitCode.OUTPUT
        result.exit_code = code
