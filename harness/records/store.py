"""Append-only JSONL results: one record per phase, flushed as it completes.

``results/<run-id>.jsonl`` holds the records (docs/records.md), ``<run-id>.manifest.json``
the run manifest. A killed sweep loses nothing that finished; ``--resume`` keeps the
points whose every phase is on disk and drops the records of a point that was cut off
half-way (it is rerun whole, on a fresh server, so no phase is ever recorded twice).
"""
from __future__ import annotations

import fcntl
import gzip
import json
import os
import secrets
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import NoSpace, StoreError, UsageError
from .manifest import RunManifest, as_manifest
from .phase_record import PhaseRecord, typed
from .record_check import RecordFileError, gc_paused, read_record_file
# point_key: the data point a record belongs to (``plan.Point.key`` is the same tuple)
from .recordkeys import cell_key, point_key

__all__ = ["resolve_sources", "RECORD_SUFFIX", "ARCHIVED_SUFFIX", "MANIFEST_SUFFIX", "StoreError",
           "new_run_id", "now_iso", "run_lock", "LOCK_SUFFIX", "ResultStore", "read_jsonl", "resolve_results",
           "load_records", "read_phase_records", "read_jsonl_records", "load_manifest_for",
           "run_manifest_for", "linked_runs", "point_key"]

RECORD_SUFFIX = ".jsonl"
ARCHIVED_SUFFIX = ".jsonl.gz"  # archived records (e.g. reports/h200/results): read like .jsonl
MANIFEST_SUFFIX = ".manifest.json"
LOCK_SUFFIX = ".lock"          # held by the process running the run (run_lock)


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@contextmanager
def run_lock(out_dir: str | Path, run_id: str) -> Iterator[Path]:
    """Held while a process runs ``run_id``: ``<out>/<run-id>.lock``, ``flock``ed. A second
    process (``--resume`` of a run still going) is a ``UsageError`` naming the holder, so
    two processes never run the same points into one file. The kernel drops the lock when
    its process dies, however it dies: a killed run's file blocks nothing. Removed while
    still held, at the end; a process that opened the file just before is told apart by
    the inode (it locks a file no longer at the path, and tries again)."""
    path = Path(out_dir) / f"{run_id}{LOCK_SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UsageError(f"run {run_id} is still running (pid {holder}, {path}): one "
                             "process per run; wait for it to end, or stop it, then "
                             "--resume") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield path
    finally:
        try:
            path.unlink()
        except OSError:
            pass
        os.close(fd)


class ResultStore:
    def __init__(self, out_dir: str | Path, run_id: str, *, create: bool = True):
        self.out_dir = Path(out_dir)
        self.run_id = run_id
        if create:  # not when only reading a manifest (``--resume``)
            self.out_dir.mkdir(parents=True, exist_ok=True)
        self.records_path = self.out_dir / f"{run_id}{RECORD_SUFFIX}"
        self.manifest_path = self.out_dir / f"{run_id}{MANIFEST_SUFFIX}"
        self.logs_dir = self.out_dir / f"{run_id}.logs"
        self._fh = None

    # -- records -----------------------------------------------------------------------
    def append(self, record: PhaseRecord) -> None:
        """Written and flushed to the kernel before returning: a sweep that is killed
        (Ctrl-C, SIGKILL, a crash) loses nothing that was appended. No fsync per record:
        that only guards against the machine itself going down, and costs milliseconds
        per phase on a fast sweep. ``record``: a ``PhaseRecord`` (its ``as_dict()`` is
        written, now)."""
        line = (json.dumps(_written(record), ensure_ascii=False, sort_keys=True)
                + "\n").encode()
        if self._fh is None:
            self._fh = open(self.records_path, "ab", buffering=0)
        start = self._fh.seek(0, os.SEEK_END)
        try:
            self._write(line)
        except OSError as e:
            self._cut_back(start)
            raise NoSpace(f"{self.records_path}: {e.strerror or e} after "
                          f"{self._records_before(start)} records (each one whole); make room, "
                          f"then continue with: sweep --resume {self.run_id} "
                          f"--out {self.out_dir}") from None

    def _write(self, data: bytes) -> None:
        """The write seam: all of ``data`` to the records file, or an ``OSError`` (a raw
        file may take part of a write: the rest is written until done)."""
        view = memoryview(data)
        while view:
            n = self._fh.write(view)
            view = view[n:]

    def _cut_back(self, size: int) -> None:
        """A record that could not be written whole is taken off again, so the file ends
        with the last whole record (and ``--resume`` reruns that point)."""
        try:
            os.ftruncate(self._fh.fileno(), size)
        except OSError:
            pass   # a torn last line is still cut off by --resume's check (record_check)

    def _records_before(self, size: int) -> int:
        with open(self.records_path, "rb") as fh:
            return fh.read(size).count(b"\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def read(self) -> list[PhaseRecord]:
        """This run's records so far (``read_jsonl_records``: a torn last line skipped)."""
        return read_jsonl_records(self.records_path) if self.records_path.exists() else []

    def rewrite(self, records: list[PhaseRecord]) -> None:
        """Replace the results file with ``records``, atomically (a matrix reference,
        ``--reference first`` / ``consensus``, judges the records after the run)."""
        self.close()
        self._replace_records(records)

    def _replace_records(self, records: list[PhaseRecord]) -> None:
        """The results file becomes ``records``: written beside it, synced, then renamed
        over it, so a kill at any instant leaves the old file or the new one, never half."""
        tmp = self.records_path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(_written(r), ensure_ascii=False, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.records_path)

    def prune_partial(self, phases_per_point: dict[tuple, set[str]], *,
                      keep_unplanned: bool = False) -> set[tuple]:
        """Keep only points whose requested phases are all on disk; rewrite atomically.

        Points are keyed by ``point_key`` (configuration, case, residue, document, auto
        pass). With ``keep_unplanned``, a record of a point not in ``phases_per_point``
        (e.g. an auto confirmation added at run time) is kept when its phases are
        complete. Returns the set of completed point keys."""
        records = self.read()
        seen: dict[tuple, set[str]] = {}
        for r in records:
            seen.setdefault(point_key(r), set()).add(r.phase)
        want_all = set().union(*phases_per_point.values()) if phases_per_point else set()
        done = {k for k, phases in seen.items()
                if (k in phases_per_point and phases_per_point[k] <= phases)
                or (keep_unplanned and k not in phases_per_point and want_all <= phases)}
        keep = [r for r in records if point_key(r) in done]
        if len(keep) != len(records):
            self._replace_records(keep)
        return done

    # -- manifest ----------------------------------------------------------------------
    def write_manifest(self, manifest: RunManifest | dict[str, Any]) -> None:
        """``manifest.as_dict()`` (a dict as it is), keys sorted, replaced atomically."""
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(as_manifest(manifest).as_dict(), indent=2, sort_keys=True,
                                  default=str))
        os.replace(tmp, self.manifest_path)

    def read_manifest(self) -> RunManifest:
        """This run's manifest, typed (``StoreError``: none, not one, or a newer version)."""
        if not self.manifest_path.exists():
            raise StoreError(f"no manifest for run {self.run_id} in {self.out_dir}")
        try:
            manifest = json.loads(self.manifest_path.read_text())
        except (ValueError, OSError) as e:
            raise StoreError(f"{self.manifest_path}: not a run manifest: {e}") from None
        return RunManifest.from_dict(manifest, str(self.manifest_path))


def _written(record: PhaseRecord) -> dict[str, Any]:
    """A record as its line says it: its ``as_dict()``, taken at the moment of writing
    (the store writes ``PhaseRecord``s only)."""
    return record.as_dict()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The lines of one file (``.jsonl``, or gzip-compressed ``.jsonl.gz``) as JSON, untyped:
    for a script or test that looks at a file's raw keys (the harness reads records
    through ``read_jsonl_records``, ``read_phase_records`` and ``load_records``). A torn
    last line (a sweep killed mid-write) is skipped."""
    out = []
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh, gc_paused():
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def resolve_results(ref: str | Path, out_dir: str | Path = "results") -> Path:
    """A results file path, or a run id looked up in ``out_dir``."""
    p = Path(ref)
    if p.is_file():
        return p
    for suffix in (RECORD_SUFFIX, ARCHIVED_SUFFIX):
        cand = Path(out_dir) / f"{ref}{suffix}"
        if cand.is_file():
            return cand
    raise StoreError(f"{ref}: not a results file and no run {ref!r} in {out_dir}/")


def resolve_sources(refs: Iterable[str | Path], out_dir: str | Path = "results"
                    ) -> list[str | Path]:
    """Run ids, results files and folders as results references: a folder stands for its
    results files (``.jsonl`` and ``.jsonl.gz``, by name); a folder without any is a
    ``StoreError``. Files and run ids are kept as given (``resolve_results`` finds them)."""
    out: list[str | Path] = []
    for ref in refs:
        p = Path(ref)
        if not p.is_dir():
            out.append(ref)
            continue
        files = sorted(f for f in p.iterdir()
                       if f.is_file() and f.name.endswith((RECORD_SUFFIX, ARCHIVED_SUFFIX)))
        if not files:
            raise StoreError(f"{ref}: a folder with no results files "
                             f"(*{RECORD_SUFFIX}, *{ARCHIVED_SUFFIX})")
        out += files
    return out


def read_jsonl_records(path: str | Path) -> list[PhaseRecord]:
    """One results file as a run's store reads it back, typed (a torn last line skipped,
    nothing else checked)."""
    return typed(read_jsonl(path))


def read_phase_records(path: str | Path) -> list[PhaseRecord]:
    """The typed records of one results file (``.jsonl`` / ``.jsonl.gz``), checked line by
    line (``record_check``: a line that is not a record raises ``RecordFileError``)."""
    return typed(read_record_file(path))


def load_records(refs: Iterable[str | Path], out_dir: str | Path = "results"
                 ) -> list[PhaseRecord]:
    """The typed records of several files/run ids; the last record of a (run,
    ``cell_key``: config, case, residue, phase, document, auto pass) wins, so nothing is
    counted twice. Each file is checked line by line (``record_check``): a line that is
    not a record is a ``StoreError`` naming it."""
    latest: dict[tuple, PhaseRecord] = {}
    for ref in refs:
        try:
            recs = read_phase_records(resolve_results(ref, out_dir))
        except RecordFileError as e:
            raise StoreError(str(e)) from None
        for r in recs:
            latest[(r.run_id,) + cell_key(r)] = r
    return list(latest.values())


def _manifest_path(results_path: str | Path) -> Path | None:
    """The manifest beside a results file (``.jsonl`` / ``.jsonl.gz``), when it exists."""
    p = Path(results_path)
    suffix = next((s for s in (RECORD_SUFFIX, ARCHIVED_SUFFIX) if p.name.endswith(s)), None)
    m = p.with_name(p.name[: -len(suffix)] + MANIFEST_SUFFIX) if suffix else None
    return m if m and m.exists() else None


def load_manifest_for(results_path: str | Path) -> dict[str, Any] | None:
    """The manifest beside a results file as read (a dict; None when there is none);
    ``run_manifest_for`` reads it typed."""
    m = _manifest_path(results_path)
    if m is None:
        return None
    try:
        return json.loads(m.read_text())
    except (ValueError, OSError) as e:
        raise StoreError(f"{m}: not a run manifest: {e}") from None


def run_manifest_for(results_path: str | Path) -> RunManifest | None:
    """The manifest beside a results file as ``RunManifest`` (None when there is none;
    ``StoreError`` when it is not one, or is newer than this harness reads)."""
    d = load_manifest_for(results_path)
    return None if d is None else RunManifest.from_dict(d, str(_manifest_path(results_path)))


def linked_runs(results_paths: Iterable[str | Path], link: str) -> list[tuple[RunManifest, Path]]:
    """Runs beside ``results_paths`` whose manifest's ``link`` block (e.g. ``explains``)
    names one of their runs: (that manifest, its records file), oldest first."""
    out: list[tuple[RunManifest, Path]] = []
    for rp in results_paths:
        parent = run_manifest_for(rp)
        if not parent:
            continue
        for m_path in sorted(Path(rp).parent.glob(f"*{MANIFEST_SUFFIX}")):
            try:
                m = RunManifest.from_dict(json.loads(m_path.read_text()), str(m_path))
            except (OSError, ValueError, StoreError):
                continue   # a manifest being written or not ours: not a link
            block = m.link(link)
            stem = m_path.name[: -len(MANIFEST_SUFFIX)]
            # an archived run's records are gzipped (reports/h200/results): link those too
            records = next((f for f in (m_path.with_name(stem + s) for s in
                                        (RECORD_SUFFIX, ARCHIVED_SUFFIX)) if f.is_file()), None)
            if block is not None and block.run_id == parent.run_id \
                    and records is not None:
                out.append((m, records))
    return out
