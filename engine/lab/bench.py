"""Measure the lab engine: boot to /health 200, and a ~4k-token verbatim request.

    python -m engine.lab.bench [--runs 5]

Starts real server processes on free ports (as the harness does) and prints wall time and
the server process's CPU time (user+sys) at /health 200 -- on a shared box the CPU time is
the number that does not depend on what else is running.
"""
from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _doc(n: int) -> list[str]:
    words = ("amber lantern quietly folds the narrow river under seven copper bridges while "
             "a patient heron counts silver reeds beside the hollow mill").split()
    return [f"{i + 1:03d}. " + " ".join(words[(i * 5 + j * 3) % len(words)] for j in range(9))
            for i in range(n)]


def main() -> None:
    import httpx
    import psutil

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    spec = '{"method": "mtp", "num_speculative_tokens": 3}'
    args = ["--enable-prefix-caching", "--block-size", "128", "--prefix-match-unit", "128",
            "--speculative-config", spec, "-cc", '{"cudagraph_mode": "FULL_AND_PIECEWISE"}']
    doc = _doc(220)
    content = "Reproduce the first 20 lines of the document below exactly.\n\n" + "\n".join(doc)
    expected = "\n".join(doc[:20])
    boots, cpus, lats = [], [], []
    for _ in range(a.runs):
        port = _free_port()
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "engine.lab", "--port", str(port), *args],
                                stderr=subprocess.DEVNULL)
        try:
            ps = psutil.Process(proc.pid)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
                while True:
                    try:
                        if c.get("/health").status_code == 200:
                            break
                    except httpx.HTTPError:
                        time.sleep(0.003)
                boots.append(time.monotonic() - t0)
                ct = ps.cpu_times()
                cpus.append(ct.user + ct.system)
                body = {"model": "lab-copy", "max_tokens": 1000,
                        "messages": [{"role": "user", "content": content}]}
                n = c.post("/tokenize", json={"messages": body["messages"]}).json()["count"]
                t1 = time.monotonic()
                out = c.post("/v1/chat/completions", json=body).json()
                lats.append(time.monotonic() - t1)
                assert out["choices"][0]["message"]["content"] == expected
        finally:
            proc.terminate()
            proc.wait()
    med = statistics.median
    print(f"boot to /health 200: median {med(boots) * 1000:.0f} ms wall "
          f"(min {min(boots) * 1000:.0f}), {med(cpus) * 1000:.0f} ms CPU")
    print(f"{n}-token prompt, {out['usage']['completion_tokens']}-token verbatim answer: "
          f"median {med(lats) * 1000:.1f} ms (min {min(lats) * 1000:.1f})")


if __name__ == "__main__":
    main()
