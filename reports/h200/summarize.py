"""Tables for reports/h200/README.md, computed from the archived records and manifests.

  python reports/h200/summarize.py > reports/h200/summary.md

1. every run: what it swept, its verdict counts, and the bad cells;
2. reset vs fresh, cell by cell, on the residues both swept (verdict and answer sha1);
3. how each run's wall time splits into boot, requests and teardown (the manifests' timing);
4. tok/step of the ok cells per speculative configuration (vLLM's spec-decode counters);
5. the batches vLLM's runner logged (``VLLM_LOGGING_LEVEL=DEBUG``, archived server logs of
   the issue-18 fresh runs): size and graph mode of every step, so which prefill chunk
   replayed the FULL graph is read from vLLM itself.
"""
from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from engine.presets import SPEC_TABLE  # noqa: E402
from harness.records.store import load_manifest_for, read_jsonl  # noqa: E402


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
                        spec=flag(cmd, "--spec"), k=flag(cmd, "--draft-tokens", str(
                            SPEC_TABLE.get(flag(cmd, "--spec"), (None, 3))[1])),
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
        if len(bad) > 8:  # e.g. a configuration that never booted
            kinds = Counter(x["verdict"] for x in r["recs"] if x["verdict"] != "ok")
            bad = bad[:4] + [f"… {len(bad) - 4} more ({', '.join(f'{k} {v}' for k, v in kinds.items())})"]
        res = sorted({x["residue"] for x in r["recs"]})
        res_s = "0–127" if len(res) == 128 else ",".join(map(str, res))
        spec = r["spec"] + (f" k={r['k']}" if r["spec"] != "none" else "")
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
                f"{' k=' + r['k'] if r['spec'] != 'none' else ''} {r['graph']} {r['patches']} "
                f"seed {r['seed']}")
        servers = len({(x["config_id"], x["slot"], x.get("boot_s")) for x in r["recs"]})
        print(f"| `{r['man']['run_id']}` | {what} | {servers} | {t.get('wall_s')} | "
              f"{t.get('sum_boot_s')} | {t.get('sum_requests_s')} | {t.get('median_point_s')} | "
              f"{t.get('sum_teardown_s')} |")

    tok_per_step(rs)
    runner_batches()
    auto_runs(rs)


def auto_runs(rs) -> None:
    """``--isolation auto`` runs (issue 17): each record says its pass (reset / fresh) and
    document, so k x document x isolation is read from one run's records."""
    autos = [r for r in rs if r["isolation"] == "auto"]
    if not autos:
        return
    from harness.records.phase_record import typed
    from harness.report.auto import agreement_line   # reads PhaseRecords: rs's are as read
    print("\n## `--isolation auto`: the rule's residue k + 1, k x document x isolation\n")
    print("| run | spec | graph | patches | document | residue | reset cold / self-hit "
          "| fresh cold / self-hit | agree |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(autos, key=lambda r: r["man"]["started_at"]):
        cells = defaultdict(dict)
        for x in r["recs"]:
            k = int(x["config"].get("draft_tokens") or 0)
            if x["residue"] != (k + 1) % 128:
                continue
            key = (k, x["config"]["cudagraph_mode"], x["patches"], x.get("document_seed"))
            cells[key][(x["isolation"], x["phase"])] = x["verdict"]
        for (k, graph, patches, doc), c in sorted(cells.items(), key=str):
            def pair(iso: str) -> str:
                v = [c.get((iso, ph), "–") for ph in ("cold", "self-hit")]
                return " / ".join(f"**{x}**" if x not in ("ok", "–") else x for x in v)
            both = [ph for ph in ("cold", "self-hit")
                    if ("reset", ph) in c and ("fresh", ph) in c]
            same = all((c[("reset", ph)] == "ok") == (c[("fresh", ph)] == "ok") for ph in both)
            cut = " (run interrupted)" if r["man"].get("exit_code") == 130 else ""
            agree = (f"not measured on fresh{cut}" if not both
                     else "yes" if same else "**no**")
            print(f"| `{r['man']['run_id']}` | {r['spec']} k={k} | {graph} | {patches} | {doc} "
                  f"| {k + 1} | {pair('reset')} | {pair('fresh')} | {agree} |")
    print()
    for r in sorted(autos, key=lambda r: r["man"]["started_at"]):
        t = r["man"].get("timing") or {}
        p = t.get("passes") or {}
        b = (t.get("boot_split") or {}).get("median_s") or {}
        print(f"- `{r['man']['run_id']}`: wall {t.get('wall_s')} s on {t.get('slots')} slots; "
              f"reset pass {p.get('reset', {}).get('points')} points, fresh pass "
              f"{p.get('fresh', {}).get('points')} points (median boot "
              f"{p.get('fresh', {}).get('median_boot_s')} s); all-fresh estimate "
              f"{p.get('all_fresh_estimate_s')} s, ratio {p.get('ratio_to_all_fresh')}; median "
              f"boot split: imports {b.get('python_start_and_imports_s')} s, to engine core "
              f"{b.get('api_server_to_engine_core_s')} s, to weights "
              f"{b.get('engine_core_to_weights_s')} s, compile {b.get('compile_s')} s, graphs "
              f"{b.get('graph_capture_s')} s, engine init {b.get('init_engine_s')} s, weights to "
              f"ready {b.get('weights_to_ready_s')} s, boot {b.get('boot_s')} s, first request "
              f"+{b.get('first_request_extra_s')} s. "
              + agreement_line(typed(r["recs"])))


def tok_per_step(rs) -> None:
    print("\n## tok/step of ok cells (1 + accepted / drafts, per request)\n")
    print("| run | configuration | ok cells | median | min | max |")
    print("|---|---|---|---|---|---|")
    for r in sorted(rs, key=lambda r: r["man"]["started_at"]):
        by = defaultdict(list)
        for x in r["recs"]:
            if x["verdict"] == "ok" and x.get("tok_per_step") is not None:
                by[x["config_label"]].append(float(x["tok_per_step"]))
        for label, v in sorted(by.items()):
            print(f"| `{r['man']['run_id']}` | `{label}` | {len(v)} | {statistics.median(v):.2f} "
                  f"| {min(v):.2f} | {max(v):.2f} |")


BATCH = re.compile(r"Running batch with cudagraph_mode: (\w+), batch_descriptor: "
                   r"BatchDescriptor\(num_tokens=(\d+), num_reqs=[^,]+, uniform=(\w+)")


def runner_batches() -> None:
    """Every batch of each archived DEBUG server log, run-length encoded: one fresh server
    served the cold request, then the self-hit."""
    logs = sorted((HERE / "logs").glob("issue18_fresh_mtp_*.log.gz"))
    if not logs:
        return
    print("\n## Batches vLLM's runner logged (fresh servers, `VLLM_LOGGING_LEVEL=DEBUG`)\n")
    print("`MODE:tokens` for each step in order, `uniform` marked `u`; `×n` = n steps in a row. "
          "Cold request first, then the self-hit (it starts at the next multi-hundred-token batch).\n")
    print("| server log | batches |")
    print("|---|---|")
    for f in logs:
        steps = [(m[1], m[2], m[3] == "True") for m in BATCH.finditer(
            gzip.open(f, "rt", errors="replace").read())]
        runs: list[list] = []
        for st in steps:
            if runs and runs[-1][0] == st:
                runs[-1][1] += 1
            else:
                runs.append([st, 1])
        text = " ".join(f"{mode}:{n}{' u' if uni else ''}{f' ×{c}' if c > 1 else ''}"
                        for (mode, n, uni), c in runs)
        print(f"| `{f.name}` | {text} |")


if __name__ == "__main__":
    main()
