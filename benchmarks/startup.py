"""CPU that one ``sweep`` process (and one lab server start) spends before it does its work.

The test suite starts a few hundred ``python -m harness`` processes and several hundred lab
servers; on a 2-core CI box their start-up (mostly imports) is a large share of its CPU.
Runs each command N times and prints, per command, the CPU (user + sys, the process and the
children it waited for) and the wall time: min / median / max.

    python benchmarks/startup.py [-n 5] [--root DIR ...] [--sweep]

``--root`` runs a checkout's ``harness`` and ``engine`` (PYTHONPATH=DIR); given twice (say
main and a branch) the two alternate run by run, so a change in the machine's load falls on
both, and each gets its own column; ``--sweep`` adds a real 2-point lab sweep (its two lab
servers' CPU included). Nothing is asserted: shared machines are noisy.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["COMMANDS", "measure", "main"]

ROOT = Path(__file__).resolve().parent.parent

# name -> argv after the interpreter; {tmp} is a fresh directory per run
COMMANDS = {
    "sweep --version": ["-m", "harness", "--version"],
    "sweep --help": ["-m", "harness", "--help"],
    "sweep --dry-run --residues 0-3": ["-m", "harness", "--dry-run", "--residues", "0-3"],
    "sweep, a usage error": ["-m", "harness", "--residues", "nope"],
    "lab server imports": ["-c", "import engine.lab.server, engine.lab.serve"],
}
SWEEP = {"sweep --residues 0-1 (lab, 2 servers)":
         ["-m", "harness", "--residues", "0-1", "--slots", "1", "--no-progress",
          "--out", "{tmp}/out", "--reports-dir", "{tmp}/reports"]}


def measure(argv: list[str], root: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``python argv`` with ``root`` first on
    the path."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.replace("{tmp}", tmp) for a in argv]
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, *args], cwd=root, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, wall


def _cell(runs: list[tuple[float, float]]) -> str:
    cpu = [c for c, _ in runs]
    ms = [f"{v * 1000:.0f}" for v in (min(cpu), statistics.median(cpu), max(cpu))]
    return f"{' / '.join(ms)} | {statistics.median(w for _, w in runs) * 1000:.0f}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=5, help="runs per command (default 5)")
    p.add_argument("--root", type=Path, action="append",
                   help="a checkout to run (repeatable; default: this one)")
    p.add_argument("--sweep", action="store_true", help="add a real 2-point lab sweep")
    ns = p.parse_args(argv)
    roots = [r.resolve() for r in ns.root or [ROOT]]
    commands = {**COMMANDS, **(SWEEP if ns.sweep else {})}
    print(f"{ns.n} runs each, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; CPU = user + sys of the process and its children\n")
    print("| command | " + " | ".join(f"{r}: CPU ms min / median / max | wall ms median"
                                      for r in roots) + " |")
    print("|---|" + "---|---|" * len(roots))
    for name, args in commands.items():
        runs: dict[Path, list] = {r: [] for r in roots}
        for _ in range(ns.n):
            for r in roots:
                runs[r].append(measure(args, r))
        print(f"| {name} | " + " | ".join(_cell(runs[r]) for r in roots) + " |", flush=True)


if __name__ == "__main__":
    main()
