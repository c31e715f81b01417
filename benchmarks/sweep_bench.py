"""How close is a fresh-server sweep to the irreducible cost, and how far ahead of a loop?

Runs, on the lab engine, in one go:
  1. the harness sweep (``--residues all``, cold + self-hit, fresh servers) at 1, 2, ...
     slots, reading each run's wall-time split from its manifest;
  2. the same sweep as a naive sequential loop: start the server, poll /health once a
     second, send the two requests with a plain HTTP client, kill it;
  3. prompt planning for 128 residues at 4k, 25k and 200k tokens;
and prints one markdown table with the ratios. Nothing is asserted: machines are noisy.

    python benchmarks/sweep_bench.py [--slots 1,2] [--residues all] [--skip-naive]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.presets import resolve  # noqa: E402
from harness.settings.configs import modulus_for, select_residues  # noqa: E402
from harness.serve.engines import LAB_MODEL_DIR, LabAdapter  # noqa: E402
from harness.prompts import ChatTokenizer, calibrate, plan_residue  # noqa: E402
from harness.server_pool import PortAllocator, Slot  # noqa: E402


def harness_sweep(slots: int, residues: str, context: int, out: Path) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", "--spec", "mtp", "--ctx", "huge",
                           "--residues", residues, "--context", str(context), "--slots",
                           str(slots), "--out", str(out), "--reports-dir", str(out / "reports"),
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"sweep failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    manifest = json.loads(sorted(out.glob("*.manifest.json"))[-1].read_text())
    return {"process_wall_s": wall, **manifest["timing"], "planning_s": manifest["planning_s"]}


def naive_loop(residues: str, context: int) -> dict:
    """What a user would write by hand: strictly sequential, /health polled once a second."""
    cfg = resolve("mtp", "huge")
    mod = modulus_for(cfg, 128)
    chosen, _ = select_residues(residues, cfg, mod)
    tok = ChatTokenizer.from_dir(LAB_MODEL_DIR)
    cal = calibrate(tok.count_many, context, mod)
    plans = [plan_residue(cal, r, mod) for r in chosen]  # prompts are free for the loop
    adapter, ports = LabAdapter(), PortAllocator()
    t0 = time.monotonic()
    ok = 0
    for p in plans:
        port = ports.acquire()
        argv, env = adapter.command(cfg, port, Slot("cpu0"))
        proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while True:
            time.sleep(1.0)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
        models = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models"))
        body = json.dumps({"model": models["data"][0]["id"], "messages": list(p.messages),
                           "max_tokens": 256, "temperature": 0}).encode()
        for _ in range(2):  # cold, self-hit
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                         data=body, headers={"Content-Type": "application/json"})
            answer = json.load(urllib.request.urlopen(req, timeout=120))
            ok += answer["choices"][0]["message"]["content"] == p.expected
        proc.kill()
        proc.wait()
        ports.release(port)
    return {"wall_s": time.monotonic() - t0, "points": len(plans), "ok_answers": ok}


def planning(contexts: list[int]) -> dict[int, float]:
    tok = ChatTokenizer.from_dir(LAB_MODEL_DIR)
    out = {}
    for ctx in contexts:
        t0 = time.monotonic()
        cal = calibrate(tok.count_many, ctx, 128, line_counts=tok.line_token_counts)
        [plan_residue(cal, r, 128) for r in range(128)]
        out[ctx] = time.monotonic() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", default="1,2", help="slot counts to measure (default 1,2)")
    ap.add_argument("--residues", default="all")
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--skip-naive", action="store_true")
    args = ap.parse_args()
    slot_counts = [int(s) for s in args.slots.split(",")]
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in slot_counts:
            runs[n] = harness_sweep(n, args.residues, args.context, Path(tmp) / f"s{n}")
    naive = None if args.skip_naive else naive_loop(args.residues, args.context)
    plan_s = planning([4096, 25_000, 200_000])

    best = runs[max(slot_counts)]
    one = runs[min(slot_counts)]
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; context {args.context}, residues {args.residues}, "
          "cold + self-hit, fresh server per point\n")
    print("| measure | value |")
    print("|---|---|")
    for n, r in runs.items():
        print(f"| sweep wall, {n} slot(s) | {r['wall_s']:.1f} s ({r['points']} points) |")
    print(f"| median boot / requests / teardown per point | {best['median_boot_s']*1000:.0f} / "
          f"{best['median_requests_s']*1000:.0f} / {best['median_teardown_s']*1000:.0f} ms |")
    print(f"| median harness overhead per point | {best['median_overhead_s']*1000:.1f} ms |")
    for n, r in runs.items():
        print(f"| harness overhead, {n} slot(s) | {r['overhead_fraction']:.1%} of slot time |")
        print(f"| efficiency, {n} slot(s): Σ(boot+requests+teardown) / (slots × wall) | "
              f"{r['efficiency']:.2f} (teardown overlaps the next boot, so this can pass 1) |")
        crit = (r["sum_boot_s"] + r["sum_requests_s"]) / (r["slots"] * r["wall_s"])
        print(f"| efficiency without teardown, {n} slot(s): Σ(boot+requests) / (slots × wall) | "
              f"{crit:.2f} |")
    if len(runs) > 1:
        print(f"| scaling: wall(1 slot) / wall({max(slot_counts)} slots) | "
              f"{one['wall_s'] / best['wall_s']:.2f}x |")
    if naive:
        print(f"| naive sequential loop wall | {naive['wall_s']:.1f} s "
              f"({naive['ok_answers']}/{2 * naive['points']} answers verbatim) |")
        print(f"| naive loop / harness ({max(slot_counts)} slots) | "
              f"{naive['wall_s'] / best['wall_s']:.1f}x |")
        print(f"| naive loop / harness (1 slot) | {naive['wall_s'] / one['wall_s']:.1f}x |")
    for ctx, s in plan_s.items():
        print(f"| planning 128 residues at {ctx:,} tokens | {s:.2f} s |")


if __name__ == "__main__":
    main()
