"""Checks on where a sweep's outputs go, made before any server starts.

A folder the sweep will write (``--out``, ``--reports-dir``) must be a folder, or
creatable, and writable; a file it will write (``--junit``, ``sweep report -o``) must be
in a folder that exists (a folder the user did not name is never created: ``--junit
/nonexistent/dir/j.xml`` once made ``/nonexistent``) and is writable; a results file given as an input (``--baseline``)
must be records (``record_check``). Each failure is one ``UsageError`` naming the flag.
The check creates nothing that stays: it makes and removes a temporary entry in the
folder (or in its nearest existing parent), which is the only test of writability that
also holds for root and for read-only mounts.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import UsageError
from .outfile import check_output_path, is_special

__all__ = ["check_writable_dir", "check_output_file", "check_outputs"]


def check_writable_dir(flag: str, path: Path) -> None:
    """``path`` is, or can become, a folder this process can write in."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag}: {path} exists and is not a folder")
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{flag}: cannot create {path}: {probe} is not a folder")
    try:
        made = tempfile.mkdtemp(prefix=".sweep-write-check-", dir=probe)
    except OSError as e:
        what = "write in" if probe == path else f"create {path} in"
        raise UsageError(f"{flag}: cannot {what} {probe}: {e.strerror or e}") from None
    os.rmdir(made)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: {probe} is not writable")


def check_output_file(flag: str, path: Path) -> None:
    """``path`` can be written by ``harness.publish.outfile.write_output``: a device or a FIFO is
    written in place; a file, a new path or a link's target is replaced in its folder,
    which must then be writable."""
    try:
        check_output_path(path)
    except OSError as e:
        raise UsageError(f"{flag}: {path} {e.strerror}") from None
    if not is_special(path):
        folder = Path(os.path.realpath(path)).parent
        if not folder.exists():   # a file was named, not its folder: create none
            raise UsageError(f"{flag}: {folder} does not exist (sweep creates no folder for "
                             "a file it writes; make it first, or name a file in an existing "
                             "folder)")
        check_writable_dir(flag, folder)


def check_outputs(opts) -> None:
    """Every output location of ``opts`` (a ``SweepOptions``) is usable."""
    check_writable_dir("--out", opts.outputs.out)
    check_writable_dir("--reports-dir", opts.outputs.reports_dir)
    if opts.outputs.junit is not None:
        check_output_file("--junit", opts.outputs.junit)
