"""vLLM source files from wherever they are: a directory, a local wheel, or a release on PyPI.

``--check-source`` and the CI tests read a handful of ``vllm/...`` files per release. A
vLLM wheel is ~300 MB, so a release named ``vllm==X`` is read *remotely*: the wheel's URL
comes from PyPI's JSON API, and :class:`RangeFile` gives :mod:`zipfile` a seekable file
whose reads are HTTP range requests, so only the central directory and the needed
members cross the network (a few hundred KB). Members read are cached under
``~/.cache/residue-lab/vllm-src/<version>/`` (``$RESIDUE_LAB_CACHE`` overrides the
root), after which the release is an ordinary directory tree.
"""
from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
import urllib.parse
import zipfile
from pathlib import Path
from typing import Iterable, Protocol

PYPI_JSON = "https://pypi.org/pypi/vllm/json"
RELEASE_SPEC = re.compile(r"^vllm==(?P<v>[0-9][0-9a-z.+-]*)$")
#: Every file a gate or the runner rule reads, relative to the directory holding ``vllm/``.
MEMBERS = (
    "vllm/v1/worker/gpu_model_runner.py",
    "vllm/v1/worker/gpu_input_batch.py",
    "vllm/v1/worker/gpu/model_runner.py",
    "vllm/v1/worker/gpu/cudagraph_utils.py",
    "vllm/v1/worker/gpu/states.py",
    "vllm/v1/worker/utils.py",
    "vllm/config/vllm.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
    "vllm/envs.py",
    "vllm/v1/worker/gpu_worker.py",
)


class NoVllmSource(Exception):
    """The place named holds no vLLM sources (or cannot be read)."""


class Offline(Exception):
    """PyPI could not be reached (or answered an error): nothing was read."""


class SourceTree(Protocol):
    label: str
    version: str | None

    def read(self, rel: str) -> str | None: ...


def cache_root() -> Path:
    return Path(os.environ.get("RESIDUE_LAB_CACHE", Path.home() / ".cache" / "residue-lab"))


# ---------------------------------------------------------------- directories and wheels
class DirTree:
    """A directory that holds ``vllm/`` (site-packages, an unpacked wheel or sdist's root)."""

    def __init__(self, root: Path, label: str | None = None):
        self.root = root
        self.label = label or str(root)
        self.version = _dir_version(root)

    def read(self, rel: str) -> str | None:
        path = self.root / rel
        return path.read_text() if path.is_file() else None


class WheelTree:
    """A wheel (local path or :class:`RangeFile`) read member by member, never unpacked."""

    def __init__(self, fileobj, label: str):
        try:
            self.zf = zipfile.ZipFile(fileobj)
        except zipfile.BadZipFile as exc:
            raise NoVllmSource(f"{label} is not a wheel: {exc}") from None
        self.names = set(self.zf.namelist())
        self.label = label
        self.version = _wheel_version(self.names)
        if "vllm/__init__.py" not in self.names:
            raise NoVllmSource(f"{label} holds no vllm/ package")

    def read(self, rel: str) -> str | None:
        if rel not in self.names:
            return None
        return self.zf.read(rel).decode("utf-8")


def _dir_version(root: Path) -> str | None:
    metas = sorted(root.glob("vllm-*.dist-info/METADATA"))
    for meta in metas:
        m = re.search(r"^Version: (\S+)", meta.read_text(errors="replace"), re.M)
        if m:
            return m[1]
    version_py = root / "vllm" / "_version.py"
    if version_py.is_file():
        m = re.search(r"""version\s*=\s*['"]([^'"]+)['"]""", version_py.read_text())
        if m:
            return m[1]
    return None


def _wheel_version(names: Iterable[str]) -> str | None:
    for name in names:
        m = re.match(r"^vllm-([^/]+)\.dist-info/METADATA$", name)
        if m:
            return m[1]
    return None


# ---------------------------------------------------------------- remote wheels
class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a URL whose reads are HTTP range requests.

    Reads are rounded up to ``chunk`` bytes and the chunks kept, because zipfile reads a
    member's local header and then its data as two small reads at neighbouring offsets.
    """

    def __init__(self, client, url: str, size: int, chunk: int = 1 << 18):
        self.client, self.url, self.size, self.chunk = client, url, size, chunk
        self.pos = 0
        self._chunks: dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def _chunk(self, index: int) -> bytes:
        if index not in self._chunks:
            start = index * self.chunk
            end = min(self.size, start + self.chunk) - 1
            resp = self.client.get(self.url, headers={"Range": f"bytes={start}-{end}"})
            if resp.status_code != 206:
                raise Offline(f"range request on {self.url} answered {resp.status_code}")
            self._chunks[index] = resp.content
        return self._chunks[index]

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.pos
        n = min(n, self.size - self.pos)
        out = bytearray()
        while n > 0:
            index, skip = divmod(self.pos, self.chunk)
            piece = self._chunk(index)[skip:skip + n]
            if not piece:
                break
            out += piece
            self.pos += len(piece)
            n -= len(piece)
        return bytes(out)

    def readinto(self, buf) -> int:
        data = self.read(len(buf))
        buf[:len(data)] = data
        return len(data)


def _release_wheel(client, version: str) -> tuple[str, int, str]:
    """(url, size, filename) of the release's x86_64 wheel, from PyPI's project JSON."""
    resp = client.get(PYPI_JSON)
    if resp.status_code != 200:
        raise Offline(f"{PYPI_JSON} answered {resp.status_code}")
    files = resp.json().get("releases", {}).get(version)
    if not files:
        raise NoVllmSource(f"PyPI has no vllm release {version}")
    wheels = [f for f in files if f["filename"].endswith(".whl")]
    wheels.sort(key=lambda f: "x86_64" not in f["filename"])
    if not wheels:
        raise NoVllmSource(f"vllm {version} has no wheel on PyPI")
    f = wheels[0]
    return urllib.parse.urljoin(PYPI_JSON, f["url"]), int(f["size"]), f["filename"]


def release_tree(version: str, members: Iterable[str] = MEMBERS) -> DirTree:
    """The needed members of ``vllm==version``, cached locally (fetched once, by range)."""
    dest = cache_root() / "vllm-src" / version
    done = dest / ".complete"
    if done.is_file():
        return DirTree(dest, label=f"vllm=={version} ({done.read_text().strip()})")
    try:
        import httpx
    except ImportError as exc:  # httpx comes with the test extra (openai needs it)
        raise Offline(f"httpx is not installed: {exc}") from None
    # Fill a private folder, then rename it into place: two processes (xdist workers,
    # parallel CI jobs) never see each other's half-written tree.
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=_mkdirs(dest.parent)))
    try:
        with httpx.Client(timeout=60, follow_redirects=True) as client:
            url, size, filename = _release_wheel(client, version)
            wheel = WheelTree(RangeFile(client, url, size), label=filename)
            _store(wheel, tmp, members)
        (tmp / ".complete").write_text(filename + "\n")
        try:
            tmp.rename(dest)
        except OSError:
            if not done.is_file():  # not a concurrent winner: a stale partial folder
                raise
    except (httpx.HTTPError, ValueError) as exc:  # ValueError: a non-JSON answer
        raise Offline(f"cannot read vllm {version} from PyPI: {type(exc).__name__}: {exc}") \
            from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return DirTree(dest, label=f"vllm=={version} ({done.read_text().strip()})")


def _mkdirs(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _store(wheel: WheelTree, dest: Path, members: Iterable[str]) -> None:
    for rel in members:
        text = wheel.read(rel)
        if text is None:
            continue  # absent in this release: the gates say so from the tree
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (dest / f"vllm-{wheel.version}.dist-info").mkdir(parents=True, exist_ok=True)
    (dest / f"vllm-{wheel.version}.dist-info" / "METADATA").write_text(
        f"Name: vllm\nVersion: {wheel.version}\n")
    (dest / "vllm" / "__init__.py").touch()


def open_source(spec: str) -> SourceTree:
    """A directory, a ``.whl`` file, or ``vllm==X`` (read remotely from PyPI, cached)."""
    m = RELEASE_SPEC.match(spec.strip())
    if m:
        return release_tree(m["v"])
    path = Path(spec).expanduser()
    if path.is_file():
        return WheelTree(path.open("rb"), label=str(path))
    if path.is_dir():
        for root in (path, path / "site-packages"):
            if (root / "vllm" / "__init__.py").is_file():
                return DirTree(root)
        raise NoVllmSource(f"{path} holds no vllm/ package")
    raise NoVllmSource(f"{path} does not exist")


__all__ = ["MEMBERS", "NoVllmSource", "Offline", "SourceTree", "DirTree", "WheelTree",
           "RangeFile", "release_tree", "open_source", "cache_root"]
