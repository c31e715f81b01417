"""Run the test suite (or a selection) N times and tally failures per test id: how a flaky
test is found (docs/testing.md, "Flaky tests").

    python benchmarks/flaky_tally.py --runs 5 --out /tmp/tally -- -n auto -m "not slow and not e2e"

Everything after ``--`` goes to pytest (default: ``-n auto``). Each run writes its JUnit XML
(``run-K.xml``) and appends one line to ``runs.jsonl`` in ``--out`` as it ends, so a tally
cut off half-way keeps the runs it finished; ``--tally-only`` prints the table of a folder's
XML files without running anything. Per run: exit code, wall time, passed / failed / skipped,
and the load average (1 min) before, after and the highest seen during the run (sampled every
5 s), since a 2-core box shared with other jobs changes what a timing-dependent test sees.
The table: each test id that failed or errored at least once, how often, and its first
message. Exit 0 when no run had a failure, 1 otherwise, 2 on a usage mistake.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class RunResult:
    passed: int = 0
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)   # test id -> first line of message


def test_id(classname: str, name: str, root: Path = ROOT) -> str:
    """``tests.harness.test_x`` + ``test_y[p]`` -> ``tests/harness/test_x.py::test_y[p]``
    (a class's tests: ``...test_x.py::TestC::test_y``), as pytest names them."""
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        if (root / Path(*parts[:i])).with_suffix(".py").exists():
            return "::".join(["/".join(parts[:i]) + ".py", *parts[i:], name])
    return f"{classname}::{name}"


def read_junit(path: Path, root: Path = ROOT) -> RunResult:
    """Passed, skipped and failed (failures and errors, setup or teardown included) of one
    JUnit XML file."""
    out = RunResult()
    for case in ET.parse(path).getroot().iter("testcase"):
        tid = test_id(case.get("classname", ""), case.get("name", ""), root)
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            msg = (bad.get("message") or bad.text or "").strip().splitlines()
            out.failed.setdefault(tid, msg[0][:200] if msg else bad.tag)
        elif case.find("skipped") is not None:
            out.skipped += 1
        else:
            out.passed += 1
    return out


class LoadSampler:
    """The highest 1-minute load average seen while a run goes."""

    def __init__(self, every: float = 5.0):
        self.every, self.peak = every, os.getloadavg()[0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, os.getloadavg()[0])

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_once(k: int, out: Path, pytest_args: list[str]) -> dict:
    xml = out / f"run-{k}.xml"
    argv = [sys.executable, "-m", "pytest", *pytest_args, f"--junitxml={xml}"]
    load0, t0 = os.getloadavg()[0], time.monotonic()
    with LoadSampler() as load, open(out / f"run-{k}.log", "w") as log:
        rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT).returncode
    line = {"run": k, "rc": rc, "wall_s": round(time.monotonic() - t0, 1),
            "load_before": round(load0, 2), "load_peak": round(load.peak, 2),
            "load_after": round(os.getloadavg()[0], 2), "args": pytest_args,
            "env_require_vllm": os.environ.get("RESIDUE_LAB_REQUIRE_VLLM")}
    if xml.exists():
        res = read_junit(xml)
        line.update(passed=res.passed, skipped=res.skipped, failed=sorted(res.failed))
    else:
        line["failed"] = [f"(no JUnit XML: pytest exited {rc}; see run-{k}.log)"]
    with open(out / "runs.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
    return line


def table(out: Path) -> tuple[str, int]:
    """The tally of every ``run-*.xml`` in ``out``: (text, runs with a failure)."""
    results = [read_junit(p) for p in sorted(out.glob("run-*.xml"))]
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for r in results:
        for tid, msg in r.failed.items():
            counts[tid] = counts.get(tid, 0) + 1
            first.setdefault(tid, msg)
    bad_runs = sum(1 for r in results if r.failed)
    lines = [f"{len(results)} runs, {bad_runs} with a failure, "
             f"{len(counts)} test id(s) failed at least once"]
    if counts:
        lines += ["", "| failed | test id | first message |", "|---|---|---|"]
        for tid, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            msg = first[tid].replace("|", "\\|")
            lines.append(f"| {n}/{len(results)} | `{tid}` | {msg} |")
    return "\n".join(lines), bad_runs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) \
        if "--" in argv else (argv, ["-n", "auto"])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="how many runs (default 3)")
    p.add_argument("--out", type=Path, required=True, help="folder for the XML, logs, runs.jsonl")
    p.add_argument("--tally-only", action="store_true", help="print the table of --out only")
    ns = p.parse_args(ours)
    if ns.runs < 1:
        print("flaky_tally: --runs must be at least 1", file=sys.stderr)
        return 2
    if ns.tally_only and not ns.out.is_dir():
        print(f"flaky_tally: {ns.out} is not a folder", file=sys.stderr)
        return 2
    ns.out.mkdir(parents=True, exist_ok=True)
    if not ns.tally_only:
        start = len(list(ns.out.glob("run-*.xml"))) + 1
        for k in range(start, start + ns.runs):
            line = run_once(k, ns.out, pytest_args)
            print(f"run {k}: rc={line['rc']} {line['wall_s']} s, "
                  f"{line.get('passed', '?')} passed, {len(line['failed'])} failed, "
                  f"load {line['load_before']} / peak {line['load_peak']} / "
                  f"{line['load_after']}", flush=True)
    text, bad_runs = table(ns.out)
    print(text)
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
