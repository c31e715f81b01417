"""Tables for reports/h200/README.md, computed from the archived records and manifests.

  python reports/h200/summarize.py > reports/h200/summary.md

1. every run: what it swept, its verdict counts, and the bad cells;
2. reset vs fresh, cell by cell, on the residues both swept (verdict and answer sha1);
3. how each run's wall time splits into boot, requests and teardown (the manifests' timing).
"""
from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from harness.store import load_manifest_for, read_jsonl  # noqa: E402


def flag(cmd: list[str] | str, name: str, default: str = "") -> str:
    words = cmd.split() if isinstance(cmd, str) else list(cmd)
    for i, w in enumerate(words):
        if w == name and i + 1 < len(words):
            return words[i + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return default


def runs():
    out = []
    for path in sorted((HERE / "results").glob("*.jsonl.gz")):
        man = load_manifest_for(path)
        cmd = man["command"]
        model = flag(cmd, "--model")
        out.append(dict(path=path, man=man, recs=read_jsonl(path), cmd=cmd,
                        model="dense" if model.endswith("dense") else "hybrid",
                        seed=flag(cmd, "--seed", "0"), isolation=man["isolation"],
                        spec=flag(cmd, "--spec"), k=flag(cmd, "--draft-tokens", "3"),
                        graph=flag(cmd, "--cudagraph"), patches=flag(cmd, "--patches")))
    return out


def cell(r: dict) -> str:
    return f"{r['verdict']}" if r["verdict"] == "ok" else \
        f"**{r['verdict']}** ({r.get('verbatim_n')}/{r.get('verbatim_total')}, " \
        f"{r.get('completion_tokens')} tok, `{r['sha1'][:12]}`)"


def main() -> None:
    rs = runs()
    print("## Runs\n")
    print("| run | model | seed | isolation | spec | graph | patches | residues | records | "
          "verdicts | bad cells (residue phase: cached/tail) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rs, key=lambda r: (r["model"], r["spec"], r["k"], r["isolation"], r["seed"],
                                       r["graph"], r["patches"])):
        c = Counter(x["verdict"] for x in r["recs"])
        bad = [f"{x['residue']} {x['phase']}: {x['cached_tokens']}/{x['computed_tail']}"
               for x in sorted(r["recs"], key=lambda x: (x["residue"], x["phase"]))
               if x["verdict"] != "ok"]
        res = sorted({x["residue"] for x in r["recs"]})
        res_s = "0–127" if len(res) == 128 else ",".join(map(str, res))
        spec = r["spec"] + (f" k={r['k']}" if r["spec"] == "ngram" else "")
        print(f"| `{r['man']['run_id']}` | {r['model']} | {r['seed']} | {r['isolation']} | {spec} "
              f"| {r['graph']} | {r['patches']} | {res_s} | {len(r['recs'])} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(c.items()))} | {'; '.join(bad) or '—'} |")

    print("\n## Reset vs fresh, cell by cell (hybrid, ngram k=3)\n")
    print("| seed | graph | patches | residue | phase | reset | fresh | same verdict | same answer |")
    print("|---|---|---|---|---|---|---|---|---|")
    agree = Counter()
    by_key = defaultdict(dict)
    for r in rs:
        if r["model"] != "hybrid" or r["spec"] != "ngram" or r["k"] != "3":
            continue
        for x in r["recs"]:
            cfg = x["config"]
            key = (r["seed"], cfg["cudagraph_mode"], x["patches"], x["residue"], x["phase"])
            by_key[key][r["isolation"]] = x
    for key in sorted(by_key):
        pair = by_key[key]
        if "fresh" not in pair or "reset" not in pair:
            continue
        a, b = pair["reset"], pair["fresh"]
        sv, sa = a["verdict"] == b["verdict"], a["sha1"] == b["sha1"]
        agree["cells"] += 1
        agree["verdict"] += sv
        agree["answer"] += sa
        if not (sv and sa) or a["verdict"] != "ok":
            print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | {cell(a)} | {cell(b)} "
                  f"| {'yes' if sv else '**no**'} | {'yes' if sa else '**no**'} |")
    print(f"\n{agree['cells']} shared cells; same verdict in {agree['verdict']}, same answer "
          f"(sha1) in {agree['answer']}. Rows not listed: both ok with the same answer.")

    print("\n## Wall time: boot, requests, teardown (manifests' `timing`)\n")
    print("| run | what | servers | wall s | boot s (sum) | requests s (sum) | median point s "
          "| teardown s (sum) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(rs, key=lambda r: r["man"]["started_at"]):
        t = r["man"].get("timing") or {}
        what = (f"{r['model']} {r['isolation']} {r['spec']}"
                f"{' k=' + r['k'] if r['spec'] == 'ngram' else ''} {r['graph']} {r['patches']} "
                f"seed {r['seed']}")
        servers = len({(x["config_id"], x["slot"], x.get("boot_s")) for x in r["recs"]})
        print(f"| `{r['man']['run_id']}` | {what} | {servers} | {t.get('wall_s')} | "
              f"{t.get('sum_boot_s')} | {t.get('sum_requests_s')} | {t.get('median_point_s')} | "
              f"{t.get('sum_teardown_s')} |")


if __name__ == "__main__":
    main()
