"""Compile and Triton caches shared by every server of a run and kept between runs.

vLLM keeps its torch.compile artefacts (Inductor code and the AOT-compiled function) under
``VLLM_CACHE_ROOT/torch_compile_cache`` (``compilation/backends.py``, ``decorators.py``);
Triton keeps JIT-compiled kernels under ``TRITON_CACHE_DIR`` (default ``~/.triton/cache``),
which the first requests of every fresh server fill ("Triton kernel JIT compilation during
inference"); Inductor's own scratch goes to ``TORCHINDUCTOR_CACHE_DIR`` (default
``/tmp/torchinductor_$USER``). Pointing all three into one folder the user names makes the
reuse explicit, lets a run say whether a server hit them, and survives between runs when
the folder does. Keys are content hashes (model, config, code), so sharing is safe across
configurations: a different configuration gets its own entry, never another's.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .bootlog import compile_cache_from_log

__all__ = ["CacheSnapshot", "CacheUse", "cache_env", "cache_use", "snapshot", "compile_dirs",
           "compile_fingerprint"]

_SUBDIRS = {"VLLM_CACHE_ROOT": "vllm", "TRITON_CACHE_DIR": "triton",
            "TORCHINDUCTOR_CACHE_DIR": "inductor"}
_COMPILE_DIR = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")


def cache_env(root: str | os.PathLike[str], *, create: bool = False) -> dict[str, str]:
    """The environment that puts vLLM's, Triton's and Inductor's caches under ``root``.
    Merge it into every server's env of a run. ``create`` makes the folders now (each tool
    also creates its own on first use)."""
    base = Path(root).expanduser().resolve()
    env = {}
    for var, sub in _SUBDIRS.items():
        if create:
            (base / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(base / sub)
    return env


@dataclass(frozen=True)
class CacheSnapshot:
    """File counts and bytes per cache, taken before and after a boot."""

    files: dict[str, int]
    bytes: dict[str, int]


def snapshot(root: str | os.PathLike[str]) -> CacheSnapshot:
    base = Path(root).expanduser()
    files: dict[str, int] = {}
    size: dict[str, int] = {}
    for sub in _SUBDIRS.values():
        n = b = 0
        for dirpath, _dirs, names in os.walk(base / sub):
            for name in names:
                try:
                    b += os.stat(os.path.join(dirpath, name)).st_size
                except OSError:      # a file being replaced while we walk
                    continue
                n += 1
        files[sub], size[sub] = n, b
    return CacheSnapshot(files=files, bytes=size)


@dataclass(frozen=True)
class CacheUse:
    """Whether one server used the shared caches, and the evidence.

    ``compile``: ``hit`` / ``miss`` / ``mixed`` from the log, ``None`` if the log shows no
    compile. ``compile_dir_shared``: the log's compile cache directory lies under the shared
    root (``None`` without a root or without that line), which proves the env reached the
    engine core. ``new_files``: files each cache gained during the boot (a hit adds none to
    ``vllm``; a Triton miss adds kernels to ``triton``), ``None`` without snapshots.
    """

    compile: str | None
    compile_dir: str | None
    compile_dir_shared: bool | None
    new_files: dict[str, int] | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cache_use(log_text: str, *, root: str | os.PathLike[str] | None = None,
              before: CacheSnapshot | None = None,
              after: CacheSnapshot | None = None) -> CacheUse:
    m = _COMPILE_DIR.search(log_text)
    compile_dir = m[1] if m else None
    shared = None
    if root is not None and compile_dir is not None:
        base = Path(root).expanduser().resolve()
        shared = Path(compile_dir).resolve().is_relative_to(base)
    new = None
    if before is not None and after is not None:
        new = {k: after.files.get(k, 0) - before.files.get(k, 0) for k in after.files}
    return CacheUse(compile=compile_cache_from_log(log_text), compile_dir=compile_dir,
                    compile_dir_shared=shared, new_files=new)


# vLLM 0.26.0 logs every compile cache a server uses ("Using cache directory: ROOT/
# torch_compile_cache/HASH/rank_0_0/backbone", backends.py) and, with torch >= 2.10 where
# VLLM_USE_AOT_COMPILE defaults on, where it saved or loaded the AOT-compiled function
# (ROOT/torch_compile_cache/torch_aot_compile/HASH/rank_0_0/model: "saved AOT compiled
# function to" on a miss, "Directly load AOT compilation from path" on a hit, decorators.py; its
# Inductor cache is HASH/inductor_cache, envs TORCHINDUCTOR_CACHE_DIR pointed there).
_AOT_DIR = re.compile(r"(?:saved AOT compiled function to|Directly load AOT compilation from path) (\S+)")


def compile_dirs(log_text: str) -> list[Path]:
    """The hash-level folders of the compile caches a vLLM server's log names: the
    ``torch_compile_cache/HASH`` of each "Using cache directory" line and the
    ``torch_aot_compile/HASH`` of each saved or loaded AOT function (each once)."""
    out: list[Path] = []
    for m in [*_COMPILE_DIR.finditer(log_text), *_AOT_DIR.finditer(log_text)]:
        p = Path(m[1].rstrip(".,"))
        parts = p.parts
        for anchor in ("torch_aot_compile", "torch_compile_cache"):
            if anchor in parts:
                i = parts.index(anchor)
                if i + 1 < len(parts):
                    p = Path(*parts[:i + 2])
                    break
        if p not in out:
            out.append(p)
    return out


def compile_fingerprint(log_text: str, gpu_models: list[str] | None = None,
                        env: dict[str, str] | None = None) -> dict[str, Any]:
    """What decided the server's kernels, read from the compile caches its log names after
    readiness: ``{"fingerprint", "kernels", "facts", "files", "dirs"}``. ``kernels`` is a
    digest over the kernel sources, chosen configs and split graph, normalised
    (``kernel_digest``: paths, timings and per-compile pickles left out, so every compile of
    one configuration on one machine agrees); ``fingerprint`` adds the GPU models and the
    run-time kernel switches in ``env`` (``kernel_digest.bind``; the harness binds them once
    it knows the slot's GPU). None (with ``why``) when the log names no compile cache
    (``-O0``, eager) or none is readable."""
    from .kernel_digest import bind, entries, kernel_digest
    dirs = compile_dirs(log_text)
    rows = [row for d in dirs for row in entries(d, _unrooted)]
    out: dict[str, Any] = {"dirs": [str(d) for d in dirs], "files": len(rows)}
    if not rows:
        out.update(fingerprint=None, why="the log names no compile cache with files"
                   if dirs else "the log names no compile cache (no torch.compile)")
        return out
    out["kernels"] = kernel_digest(rows)
    return bind(out, gpu_models, env)


def _unrooted(data: bytes, hash_dir: Path) -> bytes:
    """``data`` with the folder that holds the server's caches (``VLLM_CACHE_ROOT``'s
    parent: the mode puts vLLM's, Inductor's and Triton's caches side by side there)
    replaced by a placeholder, so the digest says what was compiled, not where."""
    parts = hash_dir.parts
    anchor = "torch_compile_cache"
    if anchor not in parts:
        return data
    root = Path(*parts[:parts.index(anchor)])     # VLLM_CACHE_ROOT
    base = root.parent if len(root.parent.parts) > 2 else root
    return data.replace(str(base).encode(), b"<cache>")
