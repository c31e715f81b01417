"""Is a cell measured two ways the same cell? (issue 24: restore against fresh servers, a
plain fresh server against a sleep-mode fresh server.)

For every cell (configuration, case, residue, phase, document) measured both ways: the
same verdict, and where that verdict is ``ok`` byte-identical answers. A corrupted answer's
sha1 is not compared: without ``--poison`` it depends on what each server's kernels chose
and its history left (DESIGN.md, "What a reset server is"; reports/h200/determinism/), and
with it it holds only among servers of one compile cache. For the same reason its *form* is not either: a
wrong answer on both sides whose verdicts are two wrong-answer verdicts (``broken`` on one,
``diverged`` on the other) is counted apart as "wrong both ways, in another form", never as
agreement nor as a difference; on the H200 two fresh servers of one kind differ in exactly
this way at a broken cell (reports/h200/find-state/). ``--strict`` counts those as
differences. A cell where either side did not produce a judged answer (boot-fail, crash,
timeout, infra, unjudged, or ``invalid``: a measurement that proved nothing, on either side)
is *not comparable* and listed apart; invalid on both sides is never agreement.

    # within runs: every restore (or reset) record against the fresh record of its cell
    python benchmarks/compare_isolation.py RESULTS.jsonl[.gz] ...
    # across runs: the left files' cells against the right files' (e.g. plain fresh
    # servers against sleep-mode fresh servers); --left/--right pick an isolation
    python benchmarks/compare_isolation.py PLAIN.jsonl --vs AUTO.jsonl --right fresh

Prints one summary line, then one line per cell that differs or could not be compared;
``--json FILE`` writes the same as data. Exit 0: every comparable cell agrees (and at
least one was compared); 1: a cell differs (under ``--strict`` also a wrong answer of
another form), or none could be compared; 2: a usage error.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Iterable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.records.phase_record import PhaseRecord  # noqa: E402
from harness.records.recordkeys import document_of  # noqa: E402
from harness.records.store import StoreError, load_records  # noqa: E402
from harness.names.verdict import BUG_VERDICTS  # noqa: E402

__all__ = ["cell_of", "compare", "main"]

# a judged answer of a valid measurement: an invalid cell's answer proves nothing
JUDGED = {"ok", "diverged", "broken"}


def cell_of(r: PhaseRecord) -> tuple:
    """A cell without how it was measured: configuration, case, residue, phase, document."""
    return (r.config_id or r.config_label, r.case_id, r.residue,
            r.phase, document_of(r))


def _pick(records: Iterable[PhaseRecord], isolation: str | None
          ) -> dict[tuple, PhaseRecord]:
    out: dict[tuple, PhaseRecord] = {}
    for r in records:
        if isolation is None or r.isolation == isolation:
            out[cell_of(r)] = r   # load_records already kept the latest per run and cell
    return out


def compare(left: dict[tuple, PhaseRecord], right: dict[tuple, PhaseRecord]) -> dict:
    """Agreement of the cells both sides measured."""
    same, differ, incomparable, form = [], [], [], []
    for key in sorted(set(left) & set(right), key=str):
        a, b = left[key], right[key]
        va, vb = a.verdict, b.verdict
        row = {"cell": _name(a), "left": va, "right": vb,
               "left_isolation": a.isolation, "right_isolation": b.isolation}
        if va not in JUDGED or vb not in JUDGED:
            incomparable.append(row)
        elif va != vb and va in BUG_VERDICTS and vb in BUG_VERDICTS:
            form.append({**row, "why": "wrong both ways, in another form"})
        elif va != vb:
            differ.append({**row, "why": "verdicts differ"})
        elif va == "ok" and a.answer != b.answer:
            differ.append({**row, "why": "ok answers differ",
                           "left_sha1": a.sha1, "right_sha1": b.sha1})
        else:
            same.append(row)
    verdicts = Counter(r["left"] for r in same)
    return {"compared": len(same) + len(differ) + len(form), "agree": len(same),
            "agree_verdicts": dict(verdicts), "differ": differ, "wrong_other_form": form,
            "not_comparable": incomparable,
            "left_only": len(set(left) - set(right)), "right_only": len(set(right) - set(left))}


def _name(r: PhaseRecord) -> str:
    case = f" case {r.case_id}" if r.case_id else ""
    return (f"{r.config_label or r.config_id}{case} residue {r.residue} "
            f"{r.phase} document {document_of(r)}")


def _within(records: list[PhaseRecord]) -> dict:
    """Every reused-server record (restore, reset) against the fresh record of its cell."""
    fresh = _pick(records, "fresh")
    out = {}
    for iso in ("restore", "reset", "shared"):
        reused = _pick(records, iso)
        if reused:
            out[f"{iso} vs fresh"] = compare(reused, fresh)
    return out


def summary_line(name: str, res: dict) -> str:
    v = ", ".join(f"{n} {k}" for k, n in sorted(res["agree_verdicts"].items()))
    return (f"{name}: {res['compared']} cells measured both ways, {res['agree']} agree "
            f"({v or 'none'}), {len(res['wrong_other_form'])} wrong both ways in another form "
            f"(broken vs diverged), {len(res['differ'])} differ, {len(res['not_comparable'])} not "
            f"comparable; {res['left_only']} left only, {res['right_only']} right only")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="compare_isolation.py", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="results files (.jsonl / .jsonl.gz) or run ids")
    p.add_argument("--vs", nargs="+", default=None, help="the right-hand files")
    p.add_argument("--left", default=None, help="only left records of this isolation")
    p.add_argument("--right", default=None, help="only right records of this isolation")
    p.add_argument("--json", default=None, help="write the comparison here")
    p.add_argument("--strict", action="store_true",
                   help="a wrong answer of another form on each side counts as a difference")
    ns = p.parse_args(argv)
    try:
        left_recs = load_records(ns.files)
        right_recs = load_records(ns.vs) if ns.vs else None
    except (StoreError, OSError) as e:
        print(f"compare_isolation.py: {e}", file=sys.stderr)
        return 2
    if right_recs is None:
        if ns.left or ns.right:
            print("compare_isolation.py: --left/--right go with --vs", file=sys.stderr)
            return 2
        results = _within(left_recs)
    else:
        results = {f"{ns.left or 'left'} vs {ns.right or 'right'}":
                   compare(_pick(left_recs, ns.left), _pick(right_recs, ns.right))}
    for name, res in results.items():
        print(summary_line(name, res))
        for d in res["differ"]:
            print(f"  DIFFERS: {d['cell']}: {d['why']} ({d['left_isolation']} {d['left']}, "
                  f"{d['right_isolation']} {d['right']})")
        for d in res["wrong_other_form"]:
            print(f"  WRONG BOTH WAYS: {d['cell']} ({d['left_isolation']} {d['left']}, "
                  f"{d['right_isolation']} {d['right']})")
        for d in res["not_comparable"]:
            print(f"  not comparable: {d['cell']} ({d['left']}, {d['right']})")
    if ns.json:
        Path(ns.json).write_text(json.dumps(results, indent=1))
    compared = sum(r["compared"] for r in results.values())
    differs = sum(len(r["differ"]) + (len(r["wrong_other_form"]) if ns.strict else 0)
                  for r in results.values())
    if not compared:
        print("no cell was measured both ways", file=sys.stderr)
        return 1
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
