"""What isolation costs per data point: fresh (plain, prefork) vs reset vs restore, with
ratios (issue 24). Read from the records, so any run can be costed after the fact:

- **isolation overhead** of a point: a fresh point's boot (``boot_s``), a restored point's
  restore (``restore.s``: sleep, wake, reset and their proof), a reset point's nothing the
  records time (one ``/reset_prefix_cache`` call, milliseconds);
- **point**: that plus the point's requests (the sum of its phases' ``latency_s``).

A restore sweep's first point runs on a just-booted server (``restore.means: boot``): it
is counted as one boot per configuration, not as a restored point.

    python benchmarks/isolation_cost.py RESULTS.jsonl[.gz] ... [--machine TEXT] [-o FILE]
    # measure the lab on this machine: four sweeps of --residues, one slot each
    python benchmarks/isolation_cost.py --measure-lab DIR [--residues 0-15] [--machine TEXT]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.records.phase_record import PhaseRecord  # noqa: E402
from harness.records.recordkeys import point_key  # noqa: E402
from harness.records.store import load_records  # noqa: E402

__all__ = ["point_costs", "cost_table", "main"]

ROWS = (("fresh", "plain"), ("fresh", "forked"), ("reset", None), ("restore", None))
LAB_SWEEP = ("--spec", "ngram", "--draft-tokens", "4", "--cudagraph", "FULL_AND_PIECEWISE",
             "--patches", "none", "--engine-arg=--mamba-cache-mode=align", "--context", "1200",
             "--slots", "1", "--no-progress")
LAB_RUNS = {"fresh-plain": ("--isolation", "fresh"),
            "fresh-prefork": ("--isolation", "fresh", "--launcher", "prefork"),
            "reset": ("--isolation", "reset"), "restore": ("--isolation", "restore")}


def point_costs(records: list[PhaseRecord]) -> dict[tuple, list[tuple[float, float]]]:
    """(isolation, launcher or None) -> [(overhead s, point s)] per point."""
    points: dict[tuple, list[PhaseRecord]] = defaultdict(list)
    for r in records:
        points[(r.run_id,) + point_key(r)].append(r)
    out: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for recs in points.values():
        r = recs[0]
        lat = [x.latency_s for x in recs]
        if any(v is None for v in lat) or any(x.verdict in ("boot-fail", "infra")
                                              for x in recs):
            continue
        iso = r.isolation
        if iso == "fresh":
            how = (r.server_boot or {}).get("launcher") or "plain"
            over = float(r.boot_s or 0.0)
            out[("fresh", how)].append((over, over + sum(lat)))
        elif iso == "restore":
            proof = r.restore or {}
            if proof.get("means") in ("boot", "failed", None):
                continue
            over = float(proof.get("s") or 0.0)
            out[("restore", None)].append((over, over + sum(lat)))
        elif iso in ("reset", "shared"):
            out[(iso, None)].append((0.0, sum(lat)))
    return out


def _range(vals: list[float]) -> str:
    return f"{statistics.median(vals):.3g} s ({min(vals):.3g}–{max(vals):.3g})"


def cost_table(costs: dict[tuple, list[tuple[float, float]]], machine: str) -> str:
    base_key = ("fresh", "plain") if costs.get(("fresh", "plain")) else ("fresh", "forked")
    base = costs.get(base_key)
    base_point = statistics.median(p for _, p in base) if base else None
    base_over = statistics.median(o for o, _ in base) if base else None
    base_name = "fresh plain" if base_key[1] == "plain" else "fresh prefork (no plain run)"
    lines = [f"Per-point cost by isolation on {machine} (median, min–max; ratio: median over "
             f"{base_name}'s).", "",
             "| isolation | points | isolation overhead per point | ratio | point (overhead + "
             "requests) | ratio |", "|---|---|---|---|---|---|"]
    for key in ROWS + tuple(k for k in costs if k not in ROWS):
        vals = costs.get(key)
        if not vals:
            continue
        over = [o for o, _ in vals]
        point = [p for _, p in vals]
        name = key[0] + (f" ({'prefork' if key[1] == 'forked' else key[1]})" if key[1] else "")
        r_over = (f"{statistics.median(over) / base_over:.3g}" if base_over else "–")
        r_point = (f"{statistics.median(point) / base_point:.3g}" if base_point else "–")
        over_txt = "not timed (one HTTP call)" if key[0] in ("reset", "shared") else _range(over)
        lines.append(f"| {name} | {len(vals)} | {over_txt} | "
                     f"{r_over if key[0] not in ('reset', 'shared') else '≈ 0'} | "
                     f"{_range(point)} | {r_point} |")
    return "\n".join(lines) + "\n"


def measure_lab(out: Path, residues: str) -> list[Path]:
    files = []
    for name, args in LAB_RUNS.items():
        d = out / name
        cmd = [sys.executable, "-m", "harness", *LAB_SWEEP, "--residues", residues, *args,
               "--out", str(d), "--reports-dir", str(d)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        found = sorted(d.glob("*.jsonl"))
        if proc.returncode not in (0, 1) or not found:
            raise SystemExit(f"{name}: exit {proc.returncode}: {proc.stderr[-500:]}")
        files.append(found[-1])
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="isolation_cost.py", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="results files (.jsonl / .jsonl.gz)")
    p.add_argument("--measure-lab", metavar="DIR", default=None,
                   help="run the four lab sweeps into DIR first, then cost them")
    p.add_argument("--residues", default="0-15", help="--measure-lab: residues per sweep")
    p.add_argument("--machine", default="this machine", help="named in the table's title")
    p.add_argument("-o", "--output", default=None, help="write the table here too")
    ns = p.parse_args(argv)
    files = list(ns.files)
    if ns.measure_lab:
        files += [str(f) for f in measure_lab(Path(ns.measure_lab), ns.residues)]
    if not files:
        p.error("give results files or --measure-lab DIR")
    text = cost_table(point_costs(load_records(files)), ns.machine)
    print(text)
    if ns.output:
        Path(ns.output).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
