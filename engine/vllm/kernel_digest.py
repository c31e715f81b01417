"""What decides a vLLM server's kernels, as one digest: the compile fingerprint (issue 48).

The first fingerprint hashed every file of the compile caches. On one H200 (2026-12-06,
``reports/h200/bytes/``) three ngram k = 4 servers, each compiling into a cache of its own,
got three digests while their broken cells gave the same bytes. Their file lists (65 files
each) differ only where a compile writes something that is not a kernel choice:

- Inductor's generated wrapper modules (``inductor_cache/XX/cNAME`` Python modules, 40-111 kB) embed the
  folder they were written to (``# kernel path: /tmp/rl-bytes-caches/k4-own0/...``) and are
  named by a hash of their source, so every server's have other *names*, same sizes;
- ``.best_config`` (the Triton config Inductor picked per kernel) stores the pick's
  ``time_taken_ms`` and a hash of Triton's cache entry beside the config itself;
- the pickled forms of the same code (``fxgraph/``, ``aotautograd/``, vLLM's
  ``artifact_compile_range_*`` and the AOT ``model``) carry per-compile keys and timestamps;
  vLLM's index of them (``vllm_compile_cache``) maps ranges to those keys and paths;
- ``inductor_cache/cache/HASH`` (Inductor's local autotune cache) stores measured times
  beside the decisions taken from them.

So the digest is taken over what picks the kernels, each normalised: the Triton kernel and
wrapper sources (by content, the cache's folder written out), the chosen configs without
their timings, the autotune cache's decisions without the times, vLLM's split graph
(``computation_graph``) and its cache key factors (config, environment, vLLM's code
hash, the compiler's hash: torch and Triton), plus any file no rule names (by path and
content: what is not understood counts). ``bind`` then adds the facts outside the cache
that choose kernels at run time: the GPU model and the cuBLAS/FlashAttention switches.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Callable

__all__ = ["RULES", "RUNTIME_KNOBS", "entries", "kernel_digest", "bind"]


def _skip(data: bytes) -> None:
    return None


# a folder a source names: the compile cache it was written to (a carried cache keeps the
# other machine's), and where vLLM is installed ("# Original path: .../vllm/...")
_FOLDERS = ((re.compile(rb"[^\s'\"]*/torch_compile_cache/"), b"<cache>/torch_compile_cache/"),
            (re.compile(rb"(Original path: )[^\s'\"]*?/vllm/"), rb"\1<site>/vllm/"))


def _source(data: bytes) -> bytes:
    for pattern, placeholder in _FOLDERS:
        data = pattern.sub(placeholder, data)
    return data


def _best_config(data: bytes) -> bytes:
    """The picked config; ``time_taken_ms`` and ``triton_cache_hash`` say how long the pick
    took and where Triton filed its binary, not which kernel runs."""
    try:
        cfg = json.loads(data)
    except ValueError:
        return data
    for volatile in ("time_taken_ms", "triton_cache_hash"):
        cfg.pop(volatile, None)
    return json.dumps(cfg, sort_keys=True).encode()


def _autotune(data: bytes) -> bytes:
    """Inductor's local autotune cache: the system it ran on and the decisions, not the
    measured times (floats) the decisions were taken from."""
    try:
        doc = json.loads(data)
    except ValueError:
        return data
    cache = doc.get("cache") if isinstance(doc, dict) else None
    if isinstance(cache, dict):
        doc["cache"] = {k: v for k, v in cache.items() if not isinstance(v, float)}
    return json.dumps(doc, sort_keys=True).encode()


# (path pattern under a compile hash folder, how its content enters, by name or content only)
# first match wins; a file no row names enters whole, by path
RULES: tuple[tuple[re.Pattern, Callable[[bytes], bytes | None], bool], ...] = tuple(
    (re.compile(p), how, by_name) for p, how, by_name in (
        (r"(^|/)\.|\.lock$|\.tmp", _skip, False),                       # locks, scratch
        (r"^inductor_cache/(fxgraph|aotautograd)/", _skip, False),       # pickles of the code
        (r"/artifact_compile_range_", _skip, False),                     # vLLM's bundles
        (r"^rank_\d+_\d+/model$", _skip, False),                         # the AOT function
        (r"vllm_compile_cache\.py$", _skip, False),                      # index of keys
        (r"^inductor_cache/cache/", _autotune, False),
        (r"\.best_config$", _best_config, False),
        (r"^inductor_cache/.*\.py$", _source, False),                    # named by its text
        (r"computation_graph\.py$|cache_key_factors\.json$", _source, True),
    ))

#: environment a server runs with that picks kernels at run time (not in any cache):
#: cuBLAS's split-K/workspace, FA's split count in captured graphs (older vLLM: an env)
RUNTIME_KNOBS = ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE",
                 "VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH", "VLLM_BATCH_INVARIANT")


def _rule(rel: str) -> tuple[Callable[[bytes], bytes | None], bool]:
    for pattern, how, by_name in RULES:
        if pattern.search(rel):
            return how, by_name
    return _source, True


def entries(hash_dir: Path, unroot: Callable[[bytes, Path], bytes]) -> list[tuple[str, str]]:
    """``(key, sha1)`` of every file under one compile hash folder that decides kernels:
    the key is ``KIND/path`` for files that enter by name, ``KIND`` for those that enter
    by content only (their names are hashes of text that names the folder)."""
    out = []
    for dirpath, _dirs, names in os.walk(hash_dir):
        for name in names:
            path = Path(dirpath) / name
            rel = path.relative_to(hash_dir).as_posix()
            how, by_name = _rule(rel)
            try:
                data = how(unroot(path.read_bytes(), hash_dir))
            except OSError:      # replaced while we walk: its successor is read next boot
                continue
            if data is None:
                continue
            kind = hash_dir.parent.name
            out.append((f"{kind}/{rel}" if by_name else kind, hashlib.sha1(data).hexdigest()))
    return out


def kernel_digest(rows: list[tuple[str, str]]) -> str:
    """12 hex over the distinct ``(key, sha1)`` rows, sorted: a server that loaded a cache
    may write the same sources again under its own folder's names, which adds no kernel."""
    h = hashlib.sha1()
    for key, sha in sorted(set(rows)):
        h.update(f"{key}\0{sha}\n".encode())
    return h.hexdigest()[:12]


def bind(compiled: dict[str, Any] | None, gpu_models: list[str] | None,
         env: dict[str, str] | None) -> dict[str, Any] | None:
    """The record's ``compile`` with ``fingerprint`` over the kernels digest, the GPU
    models and the runtime knobs set in ``env`` (``facts`` says which); unchanged when it has
    no ``kernels`` digest (the lab's, or no compile)."""
    if not isinstance(compiled, dict) or not compiled.get("kernels"):
        return compiled
    facts = {"gpu": sorted(m or "?" for m in (gpu_models or [])) or None,
             "knobs": {k: env[k] for k in RUNTIME_KNOBS if env and k in env}}
    h = hashlib.sha1(f"{compiled['kernels']}\0{json.dumps(facts, sort_keys=True)}".encode())
    return {**compiled, "facts": facts, "fingerprint": h.hexdigest()[:12]}
