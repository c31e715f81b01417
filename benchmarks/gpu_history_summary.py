"""One table per history sweep's records (benchmarks/gpu_history.sh): for each configuration
(history x cudagraph x patches) and residue, each phase's verdict, where it ran (restore or
fresh server, the GPU), whether the history was proven and what its proof says (the abort
line's computed/of, the sibling's shared step, the evictions, the finding).

    python benchmarks/gpu_history_summary.py RECORDS.jsonl[.gz]... [--machine TEXT]

Reads records as written (``harness.records.store.read_jsonl``: raw keys, a torn last line
skipped), prints markdown.
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from harness.records.store import read_jsonl


def combo(r: dict) -> str:
    c = r["config"]
    return (f"{c.get('spec')} k={c.get('draft_tokens')} {c.get('cudagraph_mode')} "
            f"patches={c.get('patches')} history={c.get('history') or 'none'}")


def cell(r: dict) -> str:
    """A phase's verdict, where it ran, and the history's proof where it ran at this phase."""
    where = r.get("isolation") or "?"
    text = f"{r['verdict']} ({where})"
    h = r.get("history")
    if h:
        text += f"; proven: {h.get('reason')}" if h.get("proven") else \
            f"; NOT proven: {h.get('reason')}"
        if h.get("finding"):
            text += f"; {h['finding']}"
    if r["verdict"] != "ok":
        text += f"; cached {r.get('cached_tokens')} of {r.get('prompt_tokens')}; " \
                f"answer {str(r.get('answer') or '')[:30]!r}"
    return text.replace("|", "/")


def table(records: list[dict]) -> list[str]:
    rows: dict[tuple, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    gpus = sorted({g.get("model") or "?" for r in records
                   for g in ((r.get("server_boot") or {}).get("gpu") or [{"model": "no GPU"}])})
    for r in records:
        rows[(combo(r), r["residue"])][r["phase"]].append(cell(r))
    out = [f"GPUs named by the records: {', '.join(gpus)}", "",
           "| configuration | residue | cold | self-hit |", "|---|---|---|---|"]
    for (name, residue), phases in sorted(rows.items()):
        out.append(f"| {name} | {residue} | {'<br>'.join(phases.get('cold', []))} | "
                   f"{'<br>'.join(phases.get('self-hit', []))} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--machine", default=None, help="the machine, in words, for the heading")
    a = ap.parse_args()
    records = [r for p in a.records for r in read_jsonl(p)]
    print(f"# History sweep: {len(records)} records"
          + (f" ({a.machine})" if a.machine else ""))
    print()
    print("\n".join(table(records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
