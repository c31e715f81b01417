"""Probe: a Ray worker SIGKILLed mid-point (what the OOM killer does; ``ray.cancel(force=
True)`` ends a worker too) leaves no server behind.

Run by test_ray_cluster against its cluster: ``python worker_kill_probe.py ADDRESS TAG``.
A task starts a server the way the backend's task does (through the ``ServerGroup``
that ``Watchdog.install()`` returns) and blocks; this driver SIGKILLs the task's worker
and prints JSON: the error Ray reported, and the server processes still alive after 10 s.
"""
from __future__ import annotations

import json
import sys
import time

import psutil
import ray


def _serve(tag: str) -> None:
    from pathlib import Path

    from harness.backends.ray_task import Watchdog
    from harness.server_pool import Slot

    launch = Watchdog.install().launcher()
    log = Path(tag + ".log")  # the tag is a path in the test's tmp dir
    server = launch([sys.executable, "-c", "import time; time.sleep(600)", tag], {}, 0,
                    log, Slot("probe"))
    server.start()
    time.sleep(600)


def _tagged(tag: str) -> list[psutil.Process]:
    """The probe's servers (not this driver, whose argv carries the tag too)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        if tag in argv and "import time; time.sleep(600)" in argv:
            out.append(p)
    return out


def main(address: str, tag: str) -> int:
    from harness.backends.ray import runtime_env
    ray.init(address=address, runtime_env=runtime_env(), log_to_driver=False)
    try:
        ref = ray.remote(num_cpus=0, resources={"lab_slot": 1}, max_retries=0)(_serve).remote(tag)
        deadline = time.monotonic() + 60
        while not _tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.05)
        servers = _tagged(tag)
        if not servers:
            print(json.dumps({"error": "the task never started its server"}))
            return 1
        psutil.Process(servers[0].ppid()).kill()  # the Ray worker, as the OOM killer would
        try:
            ray.get(ref, timeout=60)
            error = None
        except Exception as e:
            error = type(e).__name__
        _, alive = psutil.wait_procs(servers, timeout=10)
        print(json.dumps({"error": error, "left": [p.pid for p in alive]}))
        for p in alive:
            p.kill()
        return 0
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
