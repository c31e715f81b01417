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

``--fresh readme`` runs each time what a new user runs: a clone of this checkout's committed
HEAD in a new folder, a new virtual environment, the README's ``pip install -e '.[test]'``,
then ``python -m pytest ARGS`` there (no vLLM, no CI variables). ``--fresh ci`` clones and runs
``bash .ci/run ARGS`` (its environment is cached per machine, the clone is new). Each line of
``runs.jsonl`` then names the commit and the install's seconds; the clone goes once its run
ends (its log and XML stay). ``--busy N`` keeps N busy loops running beside each run, the CPU
load a shared CI box puts beside a suite.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
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


# what a user's fresh shell does not have: another environment, this checkout on the path,
# the CI switches that turn a missing vLLM into a failure
FOREIGN_ENV = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "RESIDUE_LAB_REQUIRE_VLLM",
               "RESIDUE_LAB_REQUIRE_RAY", "RESIDUE_LAB_REQUIRE_CI_TOOLS")


@dataclass
class Checkout:
    """Where a run's pytest runs: ``root`` with ``python`` (this checkout, or a fresh clone)."""

    root: Path
    python: str
    commit: str | None = None
    install_s: float | None = None


def head_commit(root: Path = ROOT) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def fresh_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    venv = os.environ.get("VIRTUAL_ENV")
    if venv:   # the caller's environment off PATH, as in a new shell
        venv_bin = os.path.join(venv, "bin")
        env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                      if os.path.normpath(d) != venv_bin)
    return env


def fresh_checkout(mode: str, work: Path, log) -> Checkout:
    """A clone of HEAD under ``work``; for ``readme`` also its new venv with ``.[test]``."""
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, stdout=log,
                   stderr=subprocess.STDOUT)
    co = Checkout(clone, "", commit=head_commit(clone))
    if mode == "readme":
        t0 = time.monotonic()
        venv, env = work / "venv", fresh_env()
        python3 = shutil.which("python3", path=env.get("PATH")) or sys.executable
        for cmd in ([python3, "-m", "venv", str(venv)],
                    [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", ".[test]"]):
            subprocess.run(cmd, cwd=clone, env=env, check=True, stdout=log,
                           stderr=subprocess.STDOUT)
        co.python, co.install_s = str(venv / "bin" / "python"), round(time.monotonic() - t0, 1)
    return co


def pytest_argv(mode: str | None, co: Checkout, pytest_args: list[str], xml: Path) -> list[str]:
    if mode == "ci":
        return ["bash", ".ci/run", *pytest_args, f"--junitxml={xml}"]
    return [co.python, "-m", "pytest", *pytest_args, f"--junitxml={xml}"]


def busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def run_once(k: int, out: Path, pytest_args: list[str], fresh: str | None = None,
             busy: int = 0) -> dict:
    xml = out / f"run-{k}.xml"
    with open(out / f"run-{k}.log", "w") as log, tempfile.TemporaryDirectory(
            prefix=f"flaky-tally-{k}-", ignore_cleanup_errors=True) as work:
        co = fresh_checkout(fresh, Path(work), log) if fresh else Checkout(ROOT, sys.executable)
        log.flush()
        argv = pytest_argv(fresh, co, pytest_args, xml)
        loops = busy_loops(busy)
        load0, t0 = os.getloadavg()[0], time.monotonic()
        try:
            with LoadSampler() as load:
                rc = subprocess.run(argv, cwd=co.root, env=fresh_env() if fresh else None,
                                    stdout=log, stderr=subprocess.STDOUT).returncode
        finally:
            for p in loops:
                p.kill()
                p.wait()
        line = {"run": k, "rc": rc, "wall_s": round(time.monotonic() - t0, 1),
                "load_before": round(load0, 2), "load_peak": round(load.peak, 2),
                "load_after": round(os.getloadavg()[0], 2), "args": pytest_args,
                "env_require_vllm": os.environ.get("RESIDUE_LAB_REQUIRE_VLLM") if not fresh
                else ("1" if fresh == "ci" else None),
                "fresh": fresh, "commit": co.commit or head_commit(), "install_s": co.install_s,
                "busy_loops": busy}
        if xml.exists():
            res = read_junit(xml, co.root)
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
    p.add_argument("--fresh", choices=("readme", "ci"),
                   help="each run in a new clone of HEAD: readme = new venv + pip install -e "
                        "'.[test]' + pytest; ci = bash .ci/run")
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="N busy loops beside each run (default 0)")
    ns = p.parse_args(ours)
    if ns.runs < 1 or ns.busy < 0:
        print("flaky_tally: --runs must be at least 1 and --busy at least 0", file=sys.stderr)
        return 2
    if ns.tally_only and not ns.out.is_dir():
        print(f"flaky_tally: {ns.out} is not a folder", file=sys.stderr)
        return 2
    ns.out.mkdir(parents=True, exist_ok=True)
    if not ns.tally_only:
        start = len(list(ns.out.glob("run-*.xml"))) + 1
        for k in range(start, start + ns.runs):
            line = run_once(k, ns.out, pytest_args, ns.fresh, ns.busy)
            print(f"run {k}: rc={line['rc']} {line['wall_s']} s, "
                  f"{line.get('passed', '?')} passed, {len(line['failed'])} failed, "
                  f"load {line['load_before']} / peak {line['load_peak']} / "
                  f"{line['load_after']}", flush=True)
    text, bad_runs = table(ns.out)
    print(text)
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
