"""The cost curve's table (``benchmarks/gpu_cost_curve.py``) from its records alone:
``DIR/records.jsonl`` (+ ``DIR/manifest.json`` where there is one) -> ``DIR/cost_curve.md``.
As a script it prints the table of an archived run (records gzipped or not) and writes
nothing, so ``reports/h200/regenerate.sh`` and its test can render the committed page:

    python3 benchmarks/cost_table.py RECORDS.jsonl[.gz] [--manifest MANIFEST.json]
    python3 benchmarks/cost_table.py RUN1/records.jsonl.gz RUN2/records.jsonl.gz \
        --manifest RUN1/manifest.json --manifest RUN2/manifest.json   # runs side by side

Several runs (two GPUs, say) make one page: each server's rows are named by its run (the
GPU the run's bandwidth record names, else the run's folder), each run's header line kept.

Medians over the measured rounds (a server's first point after its boot is shown apart),
ranges and counts; ratios to the first measured server; the GiB each restore moves; what a
128-residue × 2-phase sweep of one configuration costs by each means. Every table says
"dummy weights: cost only, no verdicts".
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable

__all__ = ["NOTE", "fill_bytes", "fill_seconds", "load", "load_files", "main", "merge_runs",
           "table", "write_table"]

NOTE = "dummy weights: cost only, no verdicts"
RESIDUES, PHASES = 128, 2
DASH = "–"


def load(folder: Path) -> tuple[list[dict], dict]:
    return load_files(folder / "records.jsonl", folder / "manifest.json")


def load_files(records: Path, manifest: Path | None = None) -> tuple[list[dict], dict]:
    """Records (``.jsonl`` or, as archived, ``.jsonl.gz``) and the manifest if it exists."""
    opener = gzip.open if records.suffix == ".gz" else open
    with opener(records, "rt", encoding="utf-8") as fh:
        recs = [json.loads(line) for line in fh if line.strip()]
    found = manifest is not None and manifest.is_file()
    return recs, (json.loads(manifest.read_text()) if found else {})


def _run_label(recs: list[dict], records: Path) -> str:
    device = next((r["result"].get("device") for r in recs if r.get("kind") == "bandwidth"
                   and isinstance(r.get("result"), dict) and r["result"].get("device")), None)
    return device or records.parent.name


def merge_runs(runs: list[tuple[Path, list[dict], dict]]) -> tuple[list[dict], dict]:
    """Several runs as one: every server named ``NAME (RUN)``, where RUN is the GPU its
    run's bandwidth record names (its folder where two runs share a GPU or none says);
    the manifest keeps each run's own under ``runs``. One run comes back as it is."""
    if len(runs) == 1:
        return runs[0][1], runs[0][2]
    labels = [_run_label(recs, path) for path, recs, _ in runs]
    labels = [f"{lab}, {path.parent.name}" if labels.count(lab) > 1 else lab
              for lab, (path, _, _) in zip(labels, runs)]
    recs_out: list[dict] = []
    manifest: dict = {"note": NOTE, "servers": {}, "runs": {}}
    for lab, (_, recs, man) in zip(labels, runs):
        name = lambda n: f"{n} ({lab})" if n else n   # noqa: E731
        recs_out += [{**r, "server": name(r.get("server"))} for r in recs]
        manifest["servers"].update({name(n): v for n, v in (man.get("servers") or {}).items()})
        manifest["runs"][lab] = man
    return recs_out, manifest


def _header(manifest: dict) -> list[str]:
    def line(m: dict) -> str:
        return (f"Wall {m.get('wall_s')} s of a {m.get('deadline_s')} s deadline; stopped: "
                f"{m.get('stop_reason') or 'no (all rounds ran)'}; state fill: "
                + ("`{method}` {args} of `{cls}`".format(**m["fill_call"]) if m.get("fill_call")
                   else f"not measured ({m.get('fill_missing_why')})"))
    if "runs" in manifest:
        return [f"- {lab}: " + line(m) for lab, m in manifest["runs"].items()] + [""]
    return [line(manifest), ""]


def fill_bytes(result: Any) -> int | None:
    """Every ``bytes`` the worker's fill reported, summed over its regions (None: none)."""
    found = list(_values(result, "bytes"))
    return sum(int(v) for v in found) if found else None


def fill_seconds(result: Any) -> float | None:
    """The worker's own seconds for the fill: its top-level ``s`` (or ``seconds``), else
    the sum over its regions."""
    if isinstance(result, dict):
        for key in ("s", "seconds"):
            if isinstance(result.get(key), (int, float)):
                return float(result[key])
    found = list(_values(result, "s")) + list(_values(result, "seconds"))
    return float(sum(found)) if found else None


def _values(obj: Any, key: str) -> Iterable[float]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key and isinstance(v, (int, float)) and not isinstance(v, bool):
                yield v
            else:
                yield from _values(v, key)
    elif isinstance(obj, list):
        for v in obj:
            yield from _values(v, key)


def _stats(xs: list[float]) -> tuple[float, float, float, int] | None:
    xs = [x for x in xs if x is not None]
    return (statistics.median(xs), min(xs), max(xs), len(xs)) if xs else None


def _fmt(st, unit: str = "") -> str:
    if st is None:
        return DASH
    med, lo, hi, n = st
    return f"{_num(med)}{unit} [{_num(lo)}–{_num(hi)}] ({n})"


def _num(x: float | None) -> str:
    if x is None:
        return DASH
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) >= 0.01 else f"{x:.2g}"


def _ratio(a: float | None, b: float | None) -> str:
    return DASH if not a or not b else f"{a / b:.2f}×"


def _pct(a: float | None, b: float | None) -> str:
    return DASH if a is None or not b else f"{100 * a / b:.2f}%"


def summarize(recs: list[dict]) -> dict[str, dict[str, Any]]:
    """Per server: its boot record and the numbers the tables show."""
    out: dict[str, dict[str, Any]] = {}
    for r in recs:
        if r.get("server") and r["kind"] == "boot":
            out[r["server"]] = {"boot": r}
    for name, row in out.items():
        mine = [r for r in recs if r.get("server") == name and not r.get("error")]
        points = [r for r in mine if r["kind"] == "point" and not r.get("first_after_boot")]
        firsts = [r for r in mine if r["kind"] == "point" and r.get("first_after_boot")]
        fills = [r for r in mine if r["kind"] == "fill"]
        sleeps = [r for r in mine if r["kind"] == "sleep"]
        row.update(
            point=_stats([r["s"] for r in points]),
            cold=_stats([r["phases"]["cold"]["s"] for r in points]),
            hit=_stats([r["phases"]["self-hit"]["s"] for r in points]),
            first=firsts[0]["s"] if firsts else None,
            cached=_stats([r["phases"]["self-hit"].get("cached_tokens") for r in points]),
            fill=_stats([r["s"] for r in fills]),
            fill_worker=_stats([fill_seconds(r.get("result")) for r in fills]),
            fill_gib=_stats([(fill_bytes(r.get("result")) or 0) / 2**30 or None for r in fills]),
            fill_proven=(f"{sum(bool(r.get('proven')) for r in fills)}/{len(fills)}"
                         if fills else DASH),
            sleep=_stats([r["s"] for r in sleeps]),
            sleep_steps={k: _stats([r["steps"].get(k) for r in sleeps])
                         for k in ("sleep", "wake_up", "reset")},
            weights_gib=_stats([(r.get("allocator") or {}).get("backup") for r in sleeps]),
            kv_gone_gib=_stats([(r.get("allocator") or {}).get("gone") for r in sleeps]),
            errors=[r for r in recs if r.get("server") == name and r.get("error")],
            skips=[r for r in recs if r.get("server") == name and r["kind"] == "skip"])
    return out


def _med(st) -> float | None:
    return st[0] if st else None


def _in_given_order(rows: dict, manifest: dict | None) -> dict:
    """The servers in the order ``--servers`` gave them (the manifest's), not the order
    their boots finished: servers boot at once, so that order is the machine's timing, and
    the first measured one is every ratio's base."""
    given = list((manifest or {}).get("servers") or ())
    order = [n for n in given if n in rows] + [n for n in rows if n not in given]
    return {n: rows[n] for n in order}


def table(recs: list[dict], manifest: dict | None = None) -> str:
    rows = _in_given_order(summarize(recs), manifest)
    measured = [n for n, r in rows.items() if r["point"] or r["sleep"] or r["fill"]]
    base = measured[0] if measured else None
    b = rows.get(base, {})
    lines = [f"# Cost curve: {NOTE}", ""]
    if manifest:
        lines += _header(manifest)
    lines += [f"## Per point ({NOTE}): median [min–max] (n), seconds", "",
              "| server | params built | weights GiB | KV pool GiB | boot s | first point s | "
              "point s (cold + self-hit) | cold s | self-hit s | sleep cycle s | state fill s | "
              "fill / point | sleep / point |", "|" + "---|" * 13]
    for n, r in rows.items():
        bt = r["boot"]
        weights = _med(r["weights_gib"]) or bt.get("weights_gib")
        lines.append(
            f"| {n} | {bt.get('params', 0) / 1e9:.2f} B | {_num(weights)} | "
            f"{_num(bt.get('kv_gib'))} | {_num(bt.get('boot_s'))} ({bt.get('how')}) | "
            f"{_num(r['first'])} | {_fmt(r['point'])} | {_fmt(r['cold'])} | {_fmt(r['hit'])} | "
            f"{_fmt(r['sleep'])} | {_fmt(r['fill'])} | {_pct(_med(r['fill']), _med(r['point']))} | "
            f"{_pct(_med(r['sleep']), _med(r['point']))} |")
    lines += restore_lines(recs, rows)
    lines += ["", f"## What each restore moves, and how each cost grows (× {base}; {NOTE})", "",
              "| server | sleep: weights to host and back GiB | sleep: KV discarded GiB | "
              "sleep GiB/s | fill GiB written | fill proven | fill GiB/s | fill s (worker) | params × | "
              "KV pool × | point × | sleep × | fill × |", "|" + "---|" * 13]
    for n, r in rows.items():
        bt, w, f = r["boot"], _med(r["weights_gib"]), _med(r["fill_gib"])
        sleep_rate = 2 * w / _med(r["sleep"]) if w and r["sleep"] else None
        fill_rate = f / _med(r["fill_worker"]) if f and _med(r["fill_worker"]) else None
        lines.append(
            f"| {n} | {_num(2 * w) if w else DASH} | {_num(_med(r['kv_gone_gib']))} | "
            f"{_num(sleep_rate)} | {_num(f)} | {r['fill_proven']} | {_num(fill_rate)} | "
            f"{_fmt(r['fill_worker'])} | "
            f"{_ratio(bt.get('params'), b.get('boot', {}).get('params'))} | "
            f"{_ratio(bt.get('kv_gib'), b.get('boot', {}).get('kv_gib'))} | "
            f"{_ratio(_med(r['point']), _med(b.get('point')))} | "
            f"{_ratio(_med(r['sleep']), _med(b.get('sleep')))} | "
            f"{_ratio(_med(r['fill']), _med(b.get('fill')))} |")
    lines += ["", "Fill GiB written: the sum of the regions' bytes the poison worker returns "
              "(each layer's view; on a hybrid, layers of different KV groups share the pool's "
              "tensors, so it can exceed the pool). Sleep GiB/s: twice the weights over the "
              "whole cycle (sleep + wake + reset).",
              "", f"## One configuration, {RESIDUES} residues × {PHASES} phases, from the medians "
              f"({NOTE})", "",
              "| server | restore by state fill: boot + 128 × (point + fill) s | "
              "restore by sleep: "
              "boot + 128 × (point + sleep) s | fresh: 128 × (boot + point) s | fresh ÷ fill |",
              "|---|---|---|---|---|"]
    for n, r in rows.items():
        boot, point = r["boot"].get("boot_s"), _med(r["point"])
        if boot is None or point is None:
            continue
        by_fill = boot + RESIDUES * (point + _med(r["fill"])) if r["fill"] else None
        by_sleep = boot + RESIDUES * (point + _med(r["sleep"])) if r["sleep"] else None
        fresh = RESIDUES * (boot + point)
        lines.append(f"| {n} | {_num(by_fill)} | {_num(by_sleep)} | {_num(fresh)} | "
                     f"{_ratio(fresh, by_fill)} |")
    lines += ["", "## Boot", "", "| server | how | boot s | imports s | "
              "API server → engine core s"
              " | compile s | graph capture s | compile cache | KV cache tokens | block | "
              "error |", "|" + "---|" * 11]
    for n, r in rows.items():
        bt = r["boot"]
        st = bt.get("stages") or {}
        lines.append(f"| {n} | {bt.get('how')} | {_num(bt.get('boot_s'))} | "
                     f"{_num(st.get('python_start_and_imports_s'))} | "
                     f"{_num(st.get('api_server_to_engine_core_s'))} | "
                     f"{_num(st.get('compile_s'))} | "
                     f"{_num(st.get('graph_capture_s'))} | {bt.get('compile_cache') or DASH} | "
                     f"{bt.get('kv_cache_tokens') or DASH} | {bt.get('block_size') or DASH} | "
                     f"{(bt.get('error') or DASH)[:120]} |")
    lines += ["", *_goal_lines(rows), *_trouble_lines(rows), "", f"_{NOTE}._"]
    return "\n".join(lines) + "\n"


POOL_KINDS = ("storage_fill", "dirty_restore", "bandwidth", "audit")


def _worker_s(r: dict) -> float | None:
    res = r.get("result")
    return float(res["s"]) if isinstance(res, dict) and isinstance(res.get("s"), (int, float)) else None


def _pool_row(recs: list[dict], name: str, point: float | None) -> dict[str, Any]:
    """One server's issue-51 numbers: pool bytes, bandwidth and its limit, each fill."""
    mine = [r for r in recs if r.get("server") == name and not r.get("error")]
    kind = lambda k: [r for r in mine if r["kind"] == k]   # noqa: E731
    bw = next((r["result"] for r in kind("bandwidth") if isinstance(r.get("result"), dict)), {})
    whole = [r for r in kind("storage_fill") if r.get("round", 0) > 0] or kind("storage_fill")
    pool = next((r["result"]["restored"]["bytes"] for r in whole
                 if isinstance(r.get("result"), dict) and r["result"].get("restored")), None)
    rate = bw.get("bytes_per_s")
    dirty = kind("dirty_restore")
    ran: dict[str, int] = {}
    for r in dirty:
        res = r.get("result") or {}
        key = res.get("means", "?") + (f" ({res['why']})" if res.get("why") else "")
        ran[key] = ran.get(key, 0) + 1
    audits = [r["result"] for r in kind("audit") if isinstance(r.get("result"), dict)]
    audits += [r["result"]["audit"] for r in dirty
               if isinstance(r.get("result"), dict) and isinstance(r["result"].get("audit"), dict)]
    restored = [(r.get("result") or {}).get("restored") or {} for r in dirty
                if (r.get("result") or {}).get("means") == "dirty"]
    return {"device": bw.get("device"), "pool": pool, "bw": rate,
            "limit": 2 * pool / rate if pool and rate else None,
            "old": _stats([fill_seconds(r.get("result")) for r in kind("fill")]),
            "whole": _stats([_worker_s(r) for r in whole]),
            "dirty": _stats([r["s"] for r in dirty]),
            "dirty_worker": _stats([_worker_s(r) for r in dirty]),
            "blocks": _stats([x.get("blocks") for x in restored
                              if isinstance(x.get("blocks"), (int, float))]),
            "mib": _stats([x["bytes"] / 2**20 for x in restored if x.get("bytes") is not None]),
            "ran": ran, "audits": (sum(bool(a.get("ok")) for a in audits), len(audits)),
            "proven": (sum(bool(r.get("proven")) for r in whole + dirty), len(whole + dirty)),
            "point": point}


def restore_lines(recs: list[dict], rows: dict) -> list[str]:
    """The issue-51 section (only for records that have its kinds): the pool, the GPU's
    copy bandwidth measured in the same call and the time it allows for a fill and its
    proof (one write and one read of every byte), beside each way of restoring."""
    if not any(r.get("kind") in POOL_KINDS for r in recs):
        return []
    out = ["", f"## Restore at the speed of memory: the fills beside the bandwidth limit ({NOTE})", "",
           "| server | device | pool GiB | copy GB/s | limit ms | per-view fill s (worker) | "
           "once-per-storage fill s (worker) | × limit | dirty restore s (call) | "
           "dirty s (worker) | dirty / point | blocks | MiB restored | which ran | proven | "
           "audits ok |", "|" + "---|" * 16]
    goals = []
    for n, r in rows.items():
        p = _pool_row(recs, n, _med(r["point"]))
        if p["pool"] is None and not p["ran"]:
            continue
        whole = _med(p["whole"])
        out.append(
            f"| {n} | {p['device'] or DASH} | {_num(p['pool'] / 2**30 if p['pool'] else None)} | "
            f"{_num(p['bw'] / 1e9 if p['bw'] else None)} | "
            f"{_num(p['limit'] * 1e3 if p['limit'] else None)} | {_fmt(p['old'])} | "
            f"{_fmt(p['whole'])} | {_ratio(whole, p['limit'])} | {_fmt(p['dirty'])} | "
            f"{_fmt(p['dirty_worker'])} | {_pct(_med(p['dirty']), p['point'])} | "
            f"{_num(_med(p['blocks']))} | {_num(_med(p['mib']))} | "
            f"{'; '.join(f'{k}: {v}' for k, v in sorted(p['ran'].items())) or DASH} | "
            f"{p['proven'][0]}/{p['proven'][1]} | {p['audits'][0]}/{p['audits'][1]} |")
        if _med(p["dirty"]) is not None and p["point"]:
            pct = 100 * _med(p["dirty"]) / p["point"]
            worker = _med(p["dirty_worker"])
            split = (f"; of its {_med(p['dirty']) * 1e3:.1f} ms the worker's "
                     f"{worker * 1e3:.1f} ms, the HTTP calls the rest" if worker else "")
            goals.append(f"- {n}: dirty restore (the call, proof and prefix reset included) "
                         f"{pct:.2f}% of the point ({'met' if pct <= 1 else 'not met'}: ≤ 1%"
                         f"{split})")
        if whole is not None and p["limit"]:
            x = whole / p["limit"]
            goals.append(f"- {n}: once-per-storage fill and proof {x:.2f}× the bandwidth limit "
                         f"({'met' if x <= 2 else 'not met'}: ≤ 2×)")
    return out + ["", "Limit: twice the pool's bytes (the fill writes every byte, its proof "
                  "reads it) over the copy bandwidth the worker measured in the same call "
                  "(a device-to-device copy, CUDA events; read + write counted). Dirty: the "
                  "blocks the point's requests were given, plus the null block; which ran "
                  "says where the whole fill stood in and why. Proven: the calls whose result was ok "
                  "(a dirty restore's in-call audit included).", "", *goals]


def _goal_lines(rows: dict) -> list[str]:
    out = ["## The goal: a restore point ≤ 1% of that point's own request time", ""]
    for n, r in rows.items():
        point = _med(r["point"])
        if not point:
            continue
        for what, key in (("state fill", "fill"), ("sleep cycle", "sleep")):
            if r[key]:
                pct = 100 * _med(r[key]) / point
                verdict = "met" if pct <= 1 else "not met"
                out.append(f"- {n}: {what} {pct:.2f}% of the point ({verdict})")
            else:
                out.append(f"- {n}: {what} not measured")
    return out


def _trouble_lines(rows: dict) -> list[str]:
    out = []
    for n, r in rows.items():
        if r["skips"]:
            kinds = sorted({s["what"] for s in r["skips"]})
            out.append(f"- {n}: skipped for the deadline: {len(r['skips'])} ({', '.join(kinds)})")
        for e in r["errors"][:3]:
            out.append(f"- {n}: {e['kind']} round {e.get('round', DASH)}: {str(e['error'])[:200]}")
    return ["", "## Skipped and failed", "", *out] if out else []


def write_table(folder: Path) -> str:
    recs, manifest = load(Path(folder))
    text = table(recs, manifest)
    (Path(folder) / "cost_curve.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    """Print the table of RECORDS (and MANIFEST); a missing or unreadable file is one line
    on stderr and exit 2."""
    ap = argparse.ArgumentParser(prog="benchmarks/cost_table.py",
                                 description="the cost curve's table from archived records")
    ap.add_argument("records", type=Path, nargs="+",
                    help="records.jsonl or records.jsonl.gz (several: runs side by side)")
    ap.add_argument("--manifest", type=Path, action="append", default=[],
                    help="each run's manifest.json, in the records' order (the header)")
    a = ap.parse_args(argv)
    if len(a.manifest) > len(a.records):
        print("cost_table: error: more --manifest than records files", file=sys.stderr)
        return 2
    for path in (*a.records, *a.manifest):
        if not path.is_file():
            print(f"cost_table: error: {path}: no such file", file=sys.stderr)
            return 2
    manifests = a.manifest + [None] * (len(a.records) - len(a.manifest))
    try:
        runs = [(p, *load_files(p, m)) for p, m in zip(a.records, manifests)]
        text = table(*merge_runs(runs))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cost_table: error: {' '.join(map(str, a.records))}: not a cost curve's "
              f"records ({exc})", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
