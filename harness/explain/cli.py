"""``sweep explain``: its flags, the run, and the ladder printed on the terminal.

The ladder itself is planned by ``plan.py`` beside it and rendered by
``harness.report.explained``; this module only parses argv and says what happened.
The rungs run through the sweep's own lifecycle (``plan.ExplainSweep``, a
``residue_sweep.Sweep``): launcher, signals, rejudging, manifest, exit code as ``sweep``.
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

from ..serve.engines import adapter_class
from ..errors import ExitCode
from ..settings.asked import Asked
from ..settings.flag_checks import rule_of
from ..settings.flags import Parser, add_flags, positive_int, sweep_parser
from ..run.plan import Point
from ..records.phase_record import PhaseRecord
from ..settings.flags import DEFAULT_OUT
from ..residue_sweep import Callbacks, adapter_for
from ..names.phase import PHASES

__all__ = ["run_explain"]

EXIT_OK = ExitCode.OK
# the sweep flags explain takes too (declared once, in harness.settings.flags); not given: the
# parent run's value
SHARED_FLAGS = ("--slots", "--gpus", "--launcher", "--cache-dir", "--boot-timeout")


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _Terminal(Callbacks):
    """Each rerun's verdicts on stderr as it finishes; the ladders on stdout as plain text,
    rendered from the ladders themselves (the report file has the markdown)."""

    def say(self, line: str) -> None:
        _say(line)

    def point_done(self, point: Point, records: list[PhaseRecord], verdicts: Counter) -> None:
        _say(f"  {point.cfg.label()} residue {point.residue}: "
             + ", ".join(f"{r.phase} {r.verdict}" for r in records))

    def finished(self, result) -> None:
        from ..report.explained import ladders, render_ladder_plain
        print("\n\n".join(render_ladder_plain(lad)
                           for lad in ladders(result.manifest, result.records)))


def run_explain(argv: Sequence[str]) -> int:
    """``sweep explain RUN``."""
    p = Parser(prog="sweep explain", description="Why a cell is what it is: rerun each non-ok "
               "cell of a finished run on fresh servers, unchanged and with one configuration "
               "axis changed at a time (graph mode, patches, prefix caching, match unit, spec, "
               "block size, k +/- 1, the vLLM runner), and name the axes whose change alone "
               "cleans it. The rungs are one linked run in the same results store; `sweep "
               "report RUN` then shows them in an Explained section.")
    p.add_argument("run", help="run id (or results file) of the finished run")
    p.add_argument("--residue", type=int, metavar="R", help="only this residue's cells")
    p.add_argument("--phase", choices=PHASES, help="only this phase's cells")
    p.add_argument("--out", help="where run ids are looked up and the explain run is "
                   "written (default results/); its report goes beside it when --out is given, "
                   "else to reports/, as a sweep's")
    add_flags(p, SHARED_FLAGS, default=None)
    p.add_argument("--parallel-boots", type=positive_int("--parallel-boots"), metavar="N",
                   help="rung servers booting at once after the first, which boots alone on "
                   "3x --boot-timeout to warm the compile caches (default 4)")
    p.add_argument("--resume", metavar="RUN_ID", help="continue an interrupted explain run "
                   "of RUN (the rungs already on disk are not run again; give the same "
                   "--residue/--phase)")
    p.add_argument("--dry-run", action="store_true", help="print each cell's rungs and their "
                   "server commands; start nothing")
    ns = p.parse_args(list(argv))
    from . import plan as explain
    rule_of("--slots", "--gpus").check(Asked(ns))   # the sweep's own rule
    # the rungs run on fresh servers: the parent's auto-only flags do not apply to them
    out = ns.out or DEFAULT_OUT
    # --out unset stays unset: the report goes to reports/ as a sweep's (issue 50)
    run_flags = {"out": ns.out, "reports_dir": None, "isolation": "fresh",
                 "auto_sample": sweep_parser().get_default("auto_sample"), "resume": None, "dry_run": False, "baseline": None, "junit": None,
                 "gh_issue": None, "bisect": False}
    if ns.slots or ns.gpus:
        run_flags.update(slots=ns.slots, gpus=ns.gpus)
    run_flags.update({k: getattr(ns, k) for k in ("launcher", "cache_dir", "boot_timeout")
                      if getattr(ns, k) is not None})
    xp = explain.prepare(ns.run, out, residue=ns.residue, phase=ns.phase,
                         run_flags=run_flags, runners_for=lambda e: adapter_class(e).runners)
    if ns.parallel_boots:
        xp.parallel_boots = ns.parallel_boots
    if not xp.targets:
        return _nothing_to_explain(xp)
    if ns.dry_run:
        return _explain_dry_run(xp)
    n = len(xp.runnable())
    if ns.resume:
        explain.check_resume(xp, ns.resume, out)
    sweep = explain.ExplainSweep(xp, resume=ns.resume)
    sweep.check()
    _say(f"explaining {len(xp.targets)} cell(s) of run {xp.parent_run}: {n} rerun(s) on "
         "fresh servers")
    result = sweep.run(_Terminal())
    if not result.interrupted:
        _say(f"explain run {result.run_id} (linked to {xp.parent_run}): "
             f"{Path(out) / result.run_id}.jsonl")
    return result.exit_code


def _nothing_to_explain(xp) -> int:
    """No cell to rerun: "every cell is ok" only when that is what the parent measured;
    a run whose cells failed to boot, were invalid or unjudged measured nothing explain
    could rerun, and says so (exit 1, as the parent's own gate would)."""
    if not xp.unexplained:
        _say(f"run {xp.parent_run}: every cell is ok, nothing to explain")
        return EXIT_OK
    what = ", ".join(f"{n} {v}" for v, n in xp.unexplained.items())
    _say(f"run {xp.parent_run}: nothing explain can rerun: its not-ok cells are {what}; "
         "explain reruns broken, diverged, crash and timeout cells (a cell with no judged "
         "answer has nothing in it to explain); rerun the parent first")
    return int(ExitCode.NOT_OK)


def _explain_dry_run(xp) -> int:
    adapter = adapter_for(xp.runnable()[0].opts)
    for t in xp.targets:
        where = "".join(x for x in (f", case {t.case_id}" if t.case_id else "",
                                    f", document {t.document}"
                                    if len(xp.parent_documents) > 1 else ""))
        print(f"residue {t.residue} of {t.config_label}{where} (run {xp.parent_run}: "
              + ", ".join(f"{p} {v}" for p, v in t.phases.items()) + ")")
        for r in t.rungs:
            if r.opts is None:
                print(f"  {r.label}: not run ({r.note})")
            else:
                adapter.check(r.opts.serving.configs, r.opts.running.slots[0])
                print(f"  {r.label}: {adapter.shell_line(r.cfg, r.opts.running.slots[0])}")
    print(f"\n{len(xp.runnable())} rerun(s) on fresh servers; nothing started (--dry-run).")
    return EXIT_OK
