"""Run each test of the given paths alone, in a pytest process of its own, and list those
that fail there: a test that passes only after another test of its module (a
module-scoped server an earlier test sent requests to, a counter an earlier request moved)
fails alone every time, while under ``pytest -n auto`` it fails only when the load
scheduler happens to make it the first of its module on a worker (docs/testing.md,
"Flaky tests": how ``test_metrics_and_version`` was found).

    python benchmarks/each_alone.py --jobs 2 tests/lab tests/harness/test_live_url.py

Exit 0 when every test passed (or skipped) alone, 1 otherwise, 2 on a usage mistake.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]


def collect(paths: list[str]) -> list[str]:
    out = subprocess.run([*PYTEST, "--collect-only", "-q", *paths], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode not in (0, 5):
        raise SystemExit(f"each_alone: collection failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return [ln for ln in out.stdout.splitlines() if "::" in ln and not ln.startswith(" ")]


def run_alone(test_id: str) -> tuple[str, int, str]:
    """(test id, pytest's exit code, the last lines of its output)."""
    out = subprocess.run([*PYTEST, "-q", "-x", test_id], cwd=ROOT, capture_output=True,
                         text=True)
    return test_id, out.returncode, "\n".join(out.stdout.splitlines()[-15:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", help="test files, folders or ids")
    p.add_argument("--jobs", type=int, default=2, help="tests run at once (default 2)")
    ns = p.parse_args(argv)
    if ns.jobs < 1:
        print("each_alone: --jobs must be at least 1", file=sys.stderr)
        return 2
    ids = collect(ns.paths)
    failed = []
    with cf.ThreadPoolExecutor(ns.jobs) as pool:
        for k, (tid, rc, tail) in enumerate(pool.map(run_alone, ids), start=1):
            if rc not in (0, 5):
                failed.append(tid)
                print(f"FAILED alone: {tid}\n{tail}\n", flush=True)
            if k % 25 == 0:
                print(f"{k}/{len(ids)} run, {len(failed)} failed alone", flush=True)
    print(f"{len(ids)} tests run alone, {len(failed)} failed: "
          + (", ".join(failed) if failed else "none"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
