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

__all__ = ["CacheSnapshot", "CacheUse", "cache_env", "cache_use", "snapshot"]

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
