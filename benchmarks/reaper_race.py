"""How often does the run's reaper miss a server spawned in the instant before its owner's
pipe closes? (docs/testing.md, 2026-12-05: the reaper flake.)

    python benchmarks/reaper_race.py --runs 400
    git show 0814c75:harness/backends/_reaper.py > /tmp/old.py
    python benchmarks/reaper_race.py --runs 400 --reaper /tmp/old.py

Each run starts the reaper script (``--environ NAME=VALUE``, as a sweep does), waits until
it is blocked reading its pipe, spawns a ``sleep`` carrying that entry in a session of its
own (never registered), and closes the pipe at once: the owner died just after a spawn
returned. The sleep should then end by SIGTERM; one still alive 8 s after the reaper exited
is a miss. A miss needs the spawned process to be descheduled inside its exec, so run it
beside CPU load (another suite, busy loops). Exit 0 when nothing was missed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAPER = ROOT / "harness" / "backends" / "_reaper.py"


def blocked_on_read(pid: int, limit_s: float = 30.0) -> bool:
    """The reaper sleeps in its first read of stdin (``/proc/PID/wchan`` names a pipe wait)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            wchan = Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            return False
        if stat[0] == "S" and "pipe" in wchan:
            return True
        time.sleep(0.005)
    return False


def one(reaper: Path, i: int) -> bool:
    """True when the unregistered sleep was ended."""
    name, value = "RESIDUE_LAB_RACE", f"{os.getpid()}:{i}"
    proc = subprocess.Popen([sys.executable, str(reaper), "--environ", f"{name}={value}"],
                            stdin=subprocess.PIPE, start_new_session=True)
    blocked_on_read(proc.pid)
    server = subprocess.Popen(["sleep", "60"], env={**os.environ, name: value},
                              start_new_session=True)
    proc.stdin.close()
    proc.wait()
    try:
        return server.wait(timeout=8) == -signal.SIGTERM
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200, help="spawns to try (default 200)")
    ap.add_argument("--reaper", type=Path, default=REAPER, help="the reaper script to try")
    args = ap.parse_args(argv)
    if args.runs < 1 or not args.reaper.is_file():
        ap.error(f"--runs must be at least 1 and --reaper a file ({args.reaper})")
    started = time.monotonic()
    missed = sum(not one(args.reaper, i) for i in range(args.runs))
    load = os.getloadavg()[0]
    print(f"| reaper | runs | missed | wall | load (1 min, at the end) |\n|---|---|---|---|---|\n"
          f"| {args.reaper} | {args.runs} | {missed} | {time.monotonic() - started:.1f} s "
          f"| {load:.1f} |")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
