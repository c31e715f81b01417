"""Which GPU a server ran on, as the driver names it (issue 48).

A broken cell's bytes are made of memory nothing wrote for the request, read through kernels
the compile and the GPU chose: two H100 machines gave other bytes at ngram k >= 3 cells than
each other and than the H200s (docs/isolation.md). So every vLLM record names its GPU: the
model string ``nvidia-smi`` reports, the index the slot gave ``CUDA_VISIBLE_DEVICES``, and
the UUID (which machine, not only which model). Read once per process; a machine without
``nvidia-smi`` says so instead of guessing.
"""
from __future__ import annotations

import functools
import shutil
import subprocess
from typing import Any

__all__ = ["QUERY", "gpus", "gpu_record", "parse_query"]

QUERY = ("nvidia-smi", "--query-gpu=index,name,uuid,pci.bus_id", "--format=csv,noheader")


def parse_query(text: str) -> dict[str, dict[str, str]]:
    """``nvidia-smi``'s CSV lines as ``{index: {"index", "model", "uuid", "pci"}}``."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 4 and cells[0].isdigit():
            out[cells[0]] = {"index": cells[0], "model": cells[1], "uuid": cells[2],
                             "pci": cells[3]}
    return out


@functools.cache
def gpus() -> tuple[dict[str, dict[str, str]], str | None]:
    """(the GPUs by index, why none are known)."""
    if shutil.which(QUERY[0]) is None:
        return {}, "nvidia-smi not found"
    try:
        done = subprocess.run(QUERY, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {}, f"nvidia-smi: {type(e).__name__}"
    if done.returncode != 0:
        return {}, f"nvidia-smi exit {done.returncode}: {done.stderr.strip()[:200]}"
    return parse_query(done.stdout), None


def gpu_record(visible: str | None) -> list[dict[str, Any]] | None:
    """The ``gpu`` of a record whose server ran with ``CUDA_VISIBLE_DEVICES=visible``
    (``"0"``, ``"0,1"``): one entry per GPU, in the server's order (None on a CPU slot)."""
    if visible is None:
        return None
    known, why = gpus()
    out = []
    for idx in (v.strip() for v in str(visible).split(",") if v.strip()):
        row = known.get(idx) or next((g for g in known.values() if g["uuid"] == idx), None)
        out.append(dict(row) if row else {"index": idx, "model": None,
                                          "why": why or "not in nvidia-smi's list"})
    return out
