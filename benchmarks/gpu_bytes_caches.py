"""Copies of a vLLM compile cache that a server really loads as its own (issue 48; used by
benchmarks/gpu_bytes_experiment.py).

vLLM 0.26.0's index of a compile (``torch_compile_cache/HASH/rank_0_0/backbone/
vllm_compile_cache.py``) names each Inductor artefact by its absolute path
(``graph_handle``: ``('artifact_compile_range_1_8192_subgraph_0', '/tmp/rl-bytes-caches/
k4-own0/vllm/...')``) and the standalone adaptor loads that path
(``compilation/compiler_interface.py``: ``path = handle[1]``). A plain copy of the folder
would therefore load the *source's* files, or, for a cache carried from another machine
whose source folder exists here too, this machine's own compile of the same name. So a copy
rewrites the index's paths to its own folder, and the experiment's own servers live under
a folder of their own per machine (``--caches``), so a path left unrewritten fails to load
instead of reading another server's artefacts.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

__all__ = ["INDEX", "copy_cache", "source_root"]

INDEX = "vllm_compile_cache.py"
_ROOT = re.compile(r"'(/[^']*?)/vllm/torch_compile_cache/")


def source_root(index_text: str) -> str | None:
    """The cache root (the folder holding ``vllm/``) an index's paths were written under."""
    m = _ROOT.search(index_text)
    return m[1] if m else None


def copy_cache(src: Path, dst: Path, parts: tuple[str, ...] = ("vllm",)) -> dict:
    """The ``parts`` of the cache root ``src`` (``vllm/``: what a carried cache holds; Triton
    JITs its kernels from the sources the artefacts hold) copied under the root ``dst``, every
    index's paths rewritten to ``dst``: ``{"from", "indexes", "rewritten"}`` (the root the
    indexes named, how many there were, how many paths were replaced)."""
    for part in parts:
        shutil.copytree(src / part, dst / part)
    out: dict = {"from": None, "indexes": 0, "rewritten": 0}
    for index in dst.rglob(INDEX):
        text = index.read_text()
        old = source_root(text)
        out["indexes"] += 1
        if old is None:
            continue
        out["from"] = old
        out["rewritten"] += text.count(old + "/")
        index.write_text(text.replace(old + "/", f"{dst}/"))
    return out
