"""``sweep``: the command line. Each verb's argv is read here (``explain``'s in its room,
``harness/explain/cli.py``), the sweep verb's once, by ``settings/flag_manifest.parse_flags``.

    sweep [options]                 run a residue sweep (the default verb)
    sweep report RESULTS... [-o F]  markdown report from results files / run ids
    sweep compare OLD NEW [--json]  what changed between two runs
    sweep presets                   the SPEC / CTX preset table
    sweep explain RUN [--residue R] [--phase P]   the ablation ladder of a run's non-ok cells

Exit codes: 0 every point ok (or the gate passed), 1 a point is not ok (or a regression
against --baseline), 2 usage or configuration error, 3 the sweep could not run at all,
4 the sweep ran but an output (report file, JUnit, step summary, GitHub comment) could not
be written or posted (stderr names it and the report's path), 5 the results could not be
written mid-sweep (a full disk: every record so far whole), 130 interrupted (every
finished record is on disk; ``--resume RUN_ID`` continues).
Under ``--bisect`` the codes are git bisect run's (``harness.publish.bisect``): 0 good, 1 bad,
125 untestable, 128 a usage error (abort the bisect).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Sequence

from engine.presets import preset_table_markdown

from .. import interrupts
from ..publish.bisect import internal_error, map_exit
from ..dryrun import dry_run, preset_warnings
from ..errors import EXIT_CANNOT_RUN, ExitCode, HarnessError, OutputFailed, UsageError
from ..settings.flags import Parser, add_flags, sweep_parser
from ..options import DEFAULT_OUT, build_options, parse_sweep_argv
from ..text.plaintext import markdown_to_plain
from ..publish.posting import PostError, check_can_post, post_report
from ..publish.preflight import check_output_file
from ..run.plan import Point
from ..records.phase_record import PhaseRecord
from ..records.store import (StoreError, linked_runs, load_records, read_jsonl_records,
                             resolve_results, resolve_sources, run_manifest_for)
from ..server_pool import kill_all_servers
from ..residue_sweep import Callbacks, Sweep
from ..names.verdict import CLEAN
from ..names.phase import PHASES

__all__ = ["EXIT_ABORT", "build_options", "sweep_parser", "run_sweep", "run_report",
           "run_compare", "run_presets", "run_explain", "SUBCOMMANDS", "Terminal", "main"]

EXIT_OK, EXIT_NOT_OK, EXIT_INTERRUPTED = ExitCode.OK, ExitCode.NOT_OK, ExitCode.INTERRUPTED
EXIT_ABORT = EXIT_CANNOT_RUN


# -- the sweep verb ------------------------------------------------------------------------
def run_sweep(argv: Sequence[str]) -> int:
    """argv -> options -> ``Sweep`` -> exit code (the lifecycle is ``harness.residue_sweep``)."""
    opts = parse_sweep_argv(argv)
    sweep = Sweep(opts)
    for note in sweep.check():   # outputs, inputs, a way to post, a resumed file, the engine
        _say_wrapped(note)
    opts = sweep.options   # --url: with the configuration the server reported (check)
    for line in preset_warnings(opts):
        _say_wrapped(line)
    if opts.serving.serve:   # the line as read, and what the harness adds to it
        from ..serve.serve_line import added_lines
        for line in added_lines(opts, sweep.adapter):
            _say(line)
    if opts.running.dry_run:
        return dry_run(opts, sweep.adapter)
    if interrupts.pending():  # a signal whose KeyboardInterrupt a library swallowed
        raise KeyboardInterrupt
    return sweep.run(Terminal(show_progress=not opts.running.no_progress)).exit_code


class Terminal(Callbacks):
    """A sweep on the terminal: status lines on stderr, a progress bar (or, without one,
    a line per point that is not ok), the report as plain text on stdout."""

    def __init__(self, *, show_progress: bool) -> None:
        self.show_progress = show_progress
        self.bar = None

    def say(self, line: str) -> None:
        _say(line)

    def started(self, run_id: str, points: int) -> None:
        self.bar = _progress(points, self.show_progress)

    def point_done(self, point: Point, records: list[PhaseRecord], verdicts: Counter) -> None:
        bad = [r for r in records if r.verdict not in CLEAN]
        if bad and not self.show_progress:
            _say(f"  residue {point.residue}: " + ", ".join(f"{r.phase} {r.verdict}"
                                                           for r in bad))
        if self.bar is not None:
            self.bar.set_postfix_str(_counts(verdicts), refresh=False)
            self.bar.update(1)

    def point_added(self, point: Point) -> None:
        if self.bar is not None:
            self.bar.total += 1
            self.bar.refresh()
        elif not self.show_progress:
            _say(f"  residue {point.residue}: {point.confirms}, fresh confirmation added")

    def stopped(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def finished(self, result) -> None:
        """The short plain report (``report/terminal.py``); the file has the markdown."""
        from .. import report
        print(report.render_terminal(result.records, [result.manifest],
                                     width=report.terminal_width()))


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


def _say_wrapped(msg: str) -> None:
    """A long note (a preset's warning) in the terminal's width, continued indented."""
    from ..report.terminal import terminal_width
    from ..text.plaintext import wrap_prose
    _say("\n".join(wrap_prose(msg, terminal_width(), "  ")))


# -- sub-verbs -----------------------------------------------------------------------------
def run_report(argv: Sequence[str]) -> int:
    p = Parser(prog="sweep report", description="Markdown report from results files or run "
               "ids: to -o FILE, else on stdout (plain text on a terminal, markdown when "
               "redirected).")
    p.add_argument("results", nargs="+", help="results .jsonl files or run ids")
    p.add_argument("-o", "--output", help="write the markdown to this file")
    p.add_argument("--out", default=DEFAULT_OUT, help="where run ids are looked up")
    # the sweep's own declarations (harness.settings.flags): the report reads and posts the same way
    add_flags(p, ("--full", "--gh-issue", "--gh-repo", "--gh-dry-run"))
    ns = p.parse_args(list(argv))
    from .. import report
    way = check_can_post(ns.gh_issue, ns.gh_repo, ns.gh_dry_run)
    if ns.gh_issue and not ns.output:   # posted from a file: one kept where it can be found
        ns.output = str(Path(tempfile.gettempdir()) / f"residue-report-issue{ns.gh_issue}-{os.getpid()}.md")
    if ns.output:
        check_output_file("-o", Path(ns.output))
    try:  # every file checked line by line before anything is rendered or posted
        paths = [resolve_results(r, ns.out) for r in ns.results]
        records = load_records(paths)
        manifests = [m for m in (run_manifest_for(pth) for pth in paths) if m]
    except StoreError as e:
        raise UsageError(str(e)) from None
    try:   # a record the model refuses (a verdict or phase it does not know) is named
        explained = [(m, read_jsonl_records(p)) for m, p in linked_runs(paths, "explains")]
    except ValueError as e:
        raise UsageError(f"an explain run of {', '.join(map(str, paths))}: {e}") from None
    if not ns.output:
        if sys.stdout.isatty():   # the short plain report; piped, the whole markdown
            print(report.render_terminal(records, manifests, width=report.terminal_width())
                  + "(the whole report: -o FILE)")
        else:
            print(report.render_markdown(records, manifests, full=ns.full, explained=explained))
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
               "configuration and residue: fixed, regressed, still broken, newly covered. "
               "Three or more runs (or folders of runs): the cells whose verdict changed "
               "across them, oldest run first. --residue / --phase / --config / --document: "
               "those cells in every run, one row per run (one cell across builds).")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="results files, run ids or folders of results (the first is the baseline)")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.add_argument("--out", default=DEFAULT_OUT, help="where run ids are looked up")
    cell = p.add_argument_group("one cell across runs (the records of every run named)")
    cell.add_argument("--residue", type=int, help="the cell's residue")
    cell.add_argument("--phase", choices=PHASES, help="the cell's phase")
    cell.add_argument("--config", metavar="TEXT",
                      help="a configuration id, or text in its label (e.g. 'k=3 FULL_AND')")
    cell.add_argument("--document", type=int, help="the cell's document (--seed)")
    p.add_argument("--all", action="store_true",
                   help="several runs: every cell, not only those that changed or are not ok")
    ns = p.parse_args(list(argv))
    filters = {k: getattr(ns, k) for k in ("residue", "phase", "config", "document")
               if getattr(ns, k) is not None}
    if len(ns.runs) == 2 and not filters and not ns.all:
        return _compare_two(ns)
    if len(ns.runs) == 1 and not filters and not Path(ns.runs[0]).is_dir():
        raise UsageError("sweep compare: give two runs or more (or a folder of runs), or "
                         "name a cell (--residue, --phase, --config, --document) to follow")
    return _compare_many(ns, filters)


def _compare_two(ns) -> int:
    from ..publish import compare
    try:
        old = load_records(resolve_sources([ns.runs[0]], ns.out), ns.out)
        new = load_records(resolve_sources([ns.runs[1]], ns.out), ns.out)
    except StoreError as e:
        raise UsageError(str(e)) from None
    result = compare.compare_records(old, new)
    if ns.json:
        print(json.dumps(result.as_dict(), indent=2, sort_keys=True))
    else:
        _print_markdown(compare.render_compare_markdown(result))
    return EXIT_NOT_OK if result.regressed else EXIT_OK


def _compare_many(ns, filters: dict) -> int:
    """Several runs, or one cell across them: a table built on ``harness.results.frame``.
    Exit 1 when the newest run regressed against the run before it (as a two-run compare)."""
    from ..publish import compare
    from .. import results
    try:
        records = load_records(resolve_sources(ns.runs, ns.out), ns.out)
    except StoreError as e:
        raise UsageError(str(e)) from None
    df = results.frame(records=records)
    if filters:
        hist = compare.cell_history(df, **filters)
        if hist.empty:   # a cell named that no run has: a mistake, not "no change" (issue 50)
            said = " ".join(f"--{k} {v}" for k, v in filters.items())
            raise UsageError(f"sweep compare: no record of {len(ns.runs)} run(s) is the cell "
                             f"{said}; `sweep report RUN` shows a run's cells")
        if ns.json:
            print(hist.to_json(orient="records", indent=2))
        else:
            _print_markdown(compare.render_history_markdown(hist))
        return EXIT_OK
    runs = compare.run_order(df)
    if ns.json:
        print(compare.trend_frame(df, changed_only=not ns.all).to_json(orient="records", indent=2))
    else:
        _print_markdown(compare.render_trend_markdown(df, changed_only=not ns.all))
    if len(runs) < 2:
        return EXIT_OK
    last = compare.compare_records([r for r in records if r.run_id == runs[-2]],
                                   [r for r in records if r.run_id == runs[-1]])
    return EXIT_NOT_OK if last.regressed else EXIT_OK


def _print_markdown(md: str) -> None:
    print(markdown_to_plain(md) if sys.stdout.isatty() else md)


def run_presets(argv: Sequence[str]) -> int:
    Parser(prog="sweep presets", description="The SPEC / CTX preset table.").parse_args(list(argv))
    print(preset_table_markdown())
    return EXIT_OK


def run_explain(argv: Sequence[str]) -> int:
    """``sweep explain``: the ablation ladder (harness/explain/cli.py parses and prints)."""
    from ..explain.cli import run_explain as run
    return run(argv)


SUBCOMMANDS = {"report": run_report, "compare": run_compare, "presets": run_presets,
               "explain": run_explain}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    # a sweep under git bisect run (--bisect): read here, where the command line is
    bisecting = "--bisect" in args and not (args and args[0] in SUBCOMMANDS)
    try:
        if args and args[0] in SUBCOMMANDS:
            code = SUBCOMMANDS[args[0]](args[1:])
        else:
            code = run_sweep(args)
    except HarnessError as e:   # the tree of harness/errors.py: each carries its exit code
        if e.exit_code is None:   # a HandledError that escaped where it is handled: a bug
            code = internal_error(bisecting, kill_all_servers)
        else:
            print(f"sweep: {e.prefix}: {e}", file=sys.stderr)
            code = e.exit_code
    except BrokenPipeError:  # `sweep ... | head`
        sys.stderr.close()
        code = EXIT_OK
    except KeyboardInterrupt:   # a signal outside the sweep's event loop
        interrupts.ignore()
        kill_all_servers()
        print("sweep: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except Exception:   # a harness bug: re-raised; under --bisect 125 (1 is "bad"), map_exit: 2 -> 128
        code = internal_error(bisecting, kill_all_servers)
    sys.exit(map_exit(code) if bisecting else code)


if __name__ == "__main__":
    main()
