"""Which code ran: the harness version string every record and manifest carries."""
from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from . import __version__

__all__ = ["harness_version", "source_digest"]


def source_digest(root: Path | None = None) -> str:
    """12 hex of a sha1 over the Python sources of ``harness/`` and ``engine/`` (relative
    path and bytes of each): which code ran, readable without git. A ``git archive``
    snapshot of a commit and that commit's checkout give the same digest."""
    root = root or Path(__file__).resolve().parent.parent
    h = hashlib.sha1()
    for path in sorted(p for d in ("harness", "engine") for p in (root / d).rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def harness_version() -> str:
    """``0.1.0+g<commit>[.dirty].src<digest>``. The commit is read only when the sources
    sit at the top of their own git checkout: a snapshot copied inside another checkout
    (the GPU runs' ``.gpu/src``) would otherwise report that checkout's HEAD. The source
    digest is there either way."""
    root = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(root)]
    try:
        top = subprocess.run(git + ["rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        ours = bool(top) and Path(top).resolve() == root
        sha = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip() if ours else ""
        dirty = subprocess.run(git + ["status", "--porcelain", "--", "harness", "engine"],
                               capture_output=True, text=True,
                               timeout=5).stdout.strip() if sha else ""
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", ""
    local = [f"g{sha}"] if sha else []
    if dirty:
        local.append("dirty")
    local.append(f"src{source_digest(root)}")
    return f"{__version__}+{'.'.join(local)}"
