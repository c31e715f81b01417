"""The region hunt's records (benchmarks/gpu_poison.py) as markdown: per broken cell, the
answer after each fill against the server's own first answer; the fresh servers' answers
side by side; the no-false-positive pass. Reads one or more records files (.jsonl[.gz]).

    python3 benchmarks/gpu_poison_summary.py reports/h200/poison/call1-records.jsonl.gz ...
"""
from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

RULE = {"ngram-k2": 3, "ngram-k4": 5, "ngram-k5": 6, "mtp-k3": 4, "mtp-k1": 2}


def load(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in fh]


def _ans(rec: dict, first: dict | None = None) -> str:
    verdict = "ok" if rec["ok"] else "wrong"
    if first is not None and rec["sha"] == first["sha"]:
        return f"{verdict}, = first"
    return f"{verdict} `{rec['sha']}`"


def _fill_cell(rpc: dict | None) -> str:
    """Bytes filled and whether every region's checksum equals the pattern's."""
    poison = (rpc or {}).get("result", {}).get("poison") or {}
    results = poison.get("results") if isinstance(poison, dict) else None
    if not results:
        return "–" if not poison else "rpc failed"
    r = results[0]
    gib = sum(p.get("bytes", 0) for p in r["regions"].values()) / 2**30
    return f"{gib:.2f} GiB, proof {'ok' if r['ok'] else 'FAILED'}"


def hunt(label: str, recs: list[dict]) -> list[str]:
    reqs = [r for r in recs if "step" in r]
    rpcs = {(r["server"], r["rpc"]): r for r in recs if "rpc" in r}
    lines = []
    for server in sorted({r["server"] for r in reqs if r["server"].endswith("-probe")}):
        cell = server.rsplit("-", 1)[0]
        rule = RULE[cell]
        mine = [r for r in reqs if r["server"] == server and r["step"] != "all"]
        first = {r["phase"]: r for r in mine if r["step"] == "first" and r["residue"] == rule}
        lines += [f"### {label}: {cell}, residue {rule}, sleep-mode server healed before each method", "",
                  "| method | fill | cold | self-hit | neighbours cold |", "|---|---|---|---|---|",
                  f"| first request (nothing filled) | – | {_ans(first['cold'])} | "
                  f"{_ans(first['self-hit'])} | |"]
        steps = [r["step"] for r in mine if ":" in r["step"]]
        for step in dict.fromkeys(steps):
            rows = [r for r in mine if r["step"] == step]
            cold = [r for r in rows if r["residue"] == rule and r["phase"] == "cold"]
            hit = [r for r in rows if r["residue"] == rule and r["phase"] == "self-hit"]
            nb = [r for r in rows if r["residue"] != rule]
            lines.append(f"| {step.split(':', 1)[1]} | {_fill_cell(rpcs.get((server, step)))} | "
                         f"{_ans(cold[0], first['cold']) if cold else '–'} | "
                         f"{_ans(hit[0], first['self-hit']) if hit else '–'} | "
                         f"{sum(r['ok'] for r in nb)}/{len(nb)} ok |")
        lines.append("")
    return lines


def fresh(label: str, recs: list[dict]) -> list[str]:
    reqs = [r for r in recs if "step" in r and not r["server"].endswith("-probe")]
    lines = [f"### {label}: fresh servers' first answers at the rule cell (document 0)", "",
             "| server | kind | cold | self-hit | neighbours cold | after restore-by-fill: doc 0 | doc 1 cold / self-hit |",
             "|---|---|---|---|---|---|---|"]
    by = defaultdict(list)
    for r in reqs:
        by[r["server"]].append(r)
    probes = {r["server"]: r for r in recs if "step" in r and r["server"].endswith("-probe")
              and r["step"] == "first"}
    for server in sorted(set(by) | set(probes)):
        rows = by.get(server) or [r for r in recs if "step" in r and r["server"] == server
                                  and r["step"] == "first"]
        cell = server.rsplit("-", 1)[0]
        rule = RULE[cell]
        kind = ("plain" if "-plain" in server else "sleep mode (first request)"
                if server.endswith("-probe") else "poison on")
        def pick(step, phase, doc=0, residue=rule):
            got = [r for r in rows if r["step"] == step and r["phase"] == phase
                   and r["doc"] == doc and r["residue"] == residue]
            return got[0] if got else None
        c, h = pick("first", "cold"), pick("first", "self-hit")
        if c is None:
            continue
        nb = [r for r in rows if r["step"] == "first" and r["residue"] != rule]
        r0c, r0h = pick("restore-doc0", "cold"), pick("restore-doc0", "self-hit")
        d1c, d1h = pick("restore-doc1", "cold", 1), pick("restore-doc1", "self-hit", 1)
        restore0 = (f"{_ans(r0c, c)} / {_ans(r0h, h)}" if r0c and r0h else "–")
        doc1 = f"{_ans(d1c)} / {_ans(d1h)}" if d1c and d1h else "–"
        nbs = f"{sum(r['ok'] for r in nb)}/{len(nb)} ok" if nb else "–"
        lines.append(f"| {server} | {kind} | {_ans(c)} | {_ans(h) if h else '–'} | {nbs} | "
                     f"{restore0} | {doc1} |")
    return lines + [""]


def sweep_all(label: str, recs: list[dict]) -> list[str]:
    lines = []
    for server in sorted({r["server"] for r in recs if r.get("step") == "all"}):
        rows = [r for r in recs if r.get("step") == "all" and r["server"] == server]
        bad = sorted({(r["residue"], r["phase"]) for r in rows if not r["ok"]})
        residues = {r["residue"] for r in rows}
        proofs = [r.get("poison_ok") for r in rows if r["phase"] == "cold"]
        lines.append(f"- {label}, {server}: {len(residues)} residues x 2 phases with the full "
                     f"fill (state, kv, builders) before each cold send "
                     f"({sum(p is True for p in proofs)} of {len(proofs)} fill proofs ok): "
                     f"{len(rows) - len(bad)} of {len(rows)} answers ok; not ok: "
                     f"{', '.join(f'residue {r} {p}' for r, p in bad) or 'none'}.")
    return lines + ([""] if lines else [])


def summarize(paths: list[Path]) -> str:
    out = ["# The region hunt (issue 32): generated by benchmarks/gpu_poison_summary.py", "",
           "`= first`: byte-identical to that server's own first answer. Wrong answers' bytes are "
           "shown only to say whether two servers read the same stale memory.", ""]
    for path in paths:
        label = path.name.split("-records")[0]
        recs = load(path)
        out += hunt(label, recs) + fresh(label, recs) + sweep_all(label, recs)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: gpu_poison_summary.py RECORDS.jsonl[.gz]...")
    sys.stdout.write(summarize([Path(p) for p in sys.argv[1:]]))
