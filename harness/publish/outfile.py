"""Writing an output file the user named: one rule for every writer.

``sweep report -o``, the run's report, ``--junit`` and ``$GITHUB_STEP_SUMMARY`` all write
through :func:`write_output`, which writes through whatever the path *is*:

- a regular file, or a path that does not exist yet: the new content is written beside it,
  synced and renamed over it, so a kill at any instant leaves the old file or the new one;
- a symlink: the same, at the link's target (the link stays a link);
- a character device or a FIFO (``/dev/stdout``, ``/dev/null``, a named pipe): written in
  place, never replaced by a regular file; a FIFO nobody reads is refused (opening it
  would block forever);
- anything else (a folder, a socket): refused.

Append mode (the step summary) appends in place to a regular file: appending cannot
replace anything. A refusal or a failed write raises ``OSError`` with a ``strerror`` the
callers put in their one line (exit 2 before a sweep, 4 after it).
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["write_output", "check_output_path", "is_special"]


def _kind(path: Path) -> str:
    """What ``path`` (symlinks followed) is: missing, file, dir, fifo, device, other."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"   # the folder check says why it cannot be made
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "other"


def check_output_path(path: str | os.PathLike[str]) -> None:
    """``OSError`` when ``path`` can never be written by :func:`write_output` (a folder, a
    socket); said before a sweep starts, not after it."""
    kind = _kind(Path(path))
    if kind == "dir":
        raise OSError(errno.EISDIR, "is a folder; give a file path")
    if kind == "other":
        raise OSError(errno.EINVAL, "is neither a file, a device nor a FIFO")


def is_special(path: str | os.PathLike[str]) -> bool:
    """A device or a FIFO (symlinks followed): written in place, never replaced."""
    return _kind(Path(path)) in ("fifo", "device")


def write_output(path: str | os.PathLike[str], data: str | bytes, *,
                 append: bool = False) -> Path:
    """Write ``data`` to ``path`` by the module's rule; returns the path written (a
    symlink's target for a file behind a link, else ``path``)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    check_output_path(target)
    kind = _kind(target)
    if kind in ("fifo", "device"):
        _write_in_place(target, raw, fifo=kind == "fifo")
        return path
    target.parent.mkdir(parents=True, exist_ok=True)
    if append:
        with open(target, "ab") as fh:
            fh.write(raw)
        return target
    _replace(target, raw)
    return target


def _write_in_place(path: Path, raw: bytes, *, fifo: bool) -> None:
    flags = os.O_WRONLY | (os.O_NONBLOCK if fifo else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if fifo and e.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "is a FIFO with no reader") from None
        raise
    try:
        if fifo:   # a reader is there: block on a full pipe rather than fail
            os.set_blocking(fd, True)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _replace(target: Path, raw: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        try:   # keep an existing file's permissions (mkstemp makes it 0600)
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        except FileNotFoundError:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
