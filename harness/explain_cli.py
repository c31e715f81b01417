"""``sweep explain``: its flags, the run, and the ladder printed on the terminal.

The ladder itself is planned by ``harness.explain`` and rendered by
``harness.report.explained``; this module only parses argv and says what happened.
``cli`` calls it with its own ``build_options`` (so there is no import back into cli).
"""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Sequence

from .engines import adapter_class, make_adapter
from .errors import UsageError
from .flags import Parser, positive_int, sweep_parser
from .run.plan import Point
from .vocabulary import PHASES

__all__ = ["run_explain"]

EXIT_OK = 0


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_explain(argv: Sequence[str], build_options) -> int:
    """``sweep explain RUN``; ``build_options`` is the CLI's (flags -> SweepOptions)."""
    p = Parser(prog="sweep explain", description="Why a cell is what it is: rerun each non-ok "
               "cell of a finished run on fresh servers, unchanged and with one configuration "
               "axis changed at a time (graph mode, patches, prefix caching, match unit, spec, "
               "block size, k +/- 1, the vLLM runner), and name the axes whose change alone "
               "cleans it. The rungs are one linked run in the same results store; `sweep "
               "report RUN` then shows them in an Explained section.")
    p.add_argument("run", help="run id (or results file) of the finished run")
    p.add_argument("--residue", type=int, metavar="R", help="only this residue's cells")
    p.add_argument("--phase", choices=PHASES, help="only this phase's cells")
    p.add_argument("--out", default="results", help="where run ids are looked up and the "
                   "explain run is written (default results/)")
    p.add_argument("--slots", type=positive_int("--slots"), help="parallel CPU slots")
    p.add_argument("--gpus", metavar="LIST", help="one server per GPU id, e.g. 0,1")
    p.add_argument("--dry-run", action="store_true", help="print each cell's rungs and their "
                   "server commands; start nothing")
    ns = p.parse_args(list(argv))
    from . import explain
    from .report.explained import ladders, render_ladder
    if ns.slots and ns.gpus:
        raise UsageError("--slots and --gpus are exclusive: --gpus gives one slot per GPU")
    # the rungs run on fresh servers: the parent's auto-only flags do not apply to them
    run_flags = {"out": ns.out, "isolation": "fresh",
                 "auto_sample": sweep_parser().get_default("auto_sample"), "resume": None, "dry_run": False, "baseline": None, "junit": None,
                 "gh_issue": None, "bisect": False}
    if ns.slots or ns.gpus:
        run_flags.update(slots=ns.slots, gpus=ns.gpus)
    xp = explain.prepare(ns.run, ns.out, residue=ns.residue, phase=ns.phase,
                         run_flags=run_flags, build=build_options,
                         runners_for=lambda e: adapter_class(e).runners)
    if not xp.targets:
        _say(f"run {xp.parent_run}: every cell is ok, nothing to explain")
        return EXIT_OK
    if ns.dry_run:
        return _explain_dry_run(xp)
    n = len(xp.runnable())
    _say(f"explaining {len(xp.targets)} cell(s) of run {xp.parent_run}: {n} rerun(s) on "
         "fresh servers")

    def on_point(point: Point, records: list[dict]) -> None:
        _say(f"  {point.cfg.label()} residue {point.residue}: "
             + ", ".join(f"{r['phase']} {r['verdict']}" for r in records))

    manifest, records = asyncio.run(explain.execute(xp, on_point=on_point))
    print("\n\n".join(render_ladder(lad, "##") for lad in ladders(manifest, records)))
    _say(f"explain run {manifest['run_id']} (linked to {xp.parent_run}): "
         f"{Path(ns.out) / manifest['run_id']}.jsonl")
    return EXIT_OK


def _explain_dry_run(xp) -> int:
    rung = xp.runnable()[0].opts
    adapter = make_adapter(rung.engine, rung.server_cmd, draft_model=rung.draft_model,
                           extra_args=rung.engine_args, isolation="fresh",
                           served_model_name=rung.served_model_name)
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
                adapter.check(r.opts.configs, r.opts.slots[0])
                print(f"  {r.label}: {adapter.shell_line(r.cfg, r.opts.slots[0])}")
    print(f"\n{len(xp.runnable())} rerun(s) on fresh servers; nothing started (--dry-run).")
    return EXIT_OK
