"""Is this file a results file? Every line a phase record of docs/records.md, checked before
anything is rendered, compared or gated on.

A results file given by a user (``sweep report``, ``sweep compare``, ``--baseline``,
``--reference golden:RUN``) is read line by line; the first line that is not a record
ends the read with one sentence naming the file, the line number and what is wrong
(``cli`` turns it into exit 2). The one line forgiven is a torn last line, a line without
its newline at the end of the file: that is what a sweep killed mid-write leaves, and the
records before it are whole.
"""
from __future__ import annotations

import gc
import gzip
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..names.phase import PHASES
from ..names.verdict import VERDICTS
from ..errors import HandledError

__all__ = ["RecordFileError", "REQUIRED_KEYS", "check_record", "read_record_file",
           "check_for_resume"]

# The keys every record of every schema version carries that the report, compare and the
# gate cannot do without (docs/records.md), with the type each must have.
REQUIRED_KEYS: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "config_id": (str,), "config": (dict,), "residue": (int,),
    "phase": (str,), "verdict": (str,),
}


class RecordFileError(HandledError, ValueError):
    """A file that is not a results file; the message names the file and line."""


def check_record(obj: Any) -> str | None:
    """What is wrong with ``obj`` as a phase record, or None when it is one."""
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}, not a record object"
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        return (f"not a phase record: missing {', '.join(repr(k) for k in missing)} "
                "(docs/records.md)")
    for key, types in REQUIRED_KEYS.items():
        value = obj[key]
        if not isinstance(value, types) or isinstance(value, bool):
            return f"{key!r} is {value!r}, not a {types[0].__name__}"
    if obj["phase"] not in PHASES:
        return f"phase {obj['phase']!r} is not one of {', '.join(PHASES)}"
    if obj["verdict"] not in VERDICTS:
        return f"verdict {obj['verdict']!r} is not one of {', '.join(VERDICTS)}"
    version = obj.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return f"schema_version {version!r} is not a positive integer"
    return None


@contextmanager
def gc_paused():
    """The cyclic garbage collector off while records are parsed or built (and back on as
    it was after). Parsed JSON holds no cycles, yet a results file with token logprobs is
    hundreds of thousands of small containers, and every few hundred of them the collector
    walks all that are still young, the older generations more and more often as the list
    grows. Measured on the 2-core box: ``reports/h200/results/20261203-133156-4ea0.jsonl.gz``
    (2,112 records, 27 MB of JSON) read in 9.4-11.7 s with it, 1.7-1.9 s without."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_record_file(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a ``.jsonl`` / ``.jsonl.gz`` results file, or
    :class:`RecordFileError` at the first line that is not one (or when there is none)."""
    path = Path(path)
    try:
        if str(path).endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                data = fh.read()
        else:
            data = path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise RecordFileError(f"{path}: cannot read it as a results file: "
                              f"{getattr(e, 'strerror', None) or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordFileError(f"{path}: not a results file: not UTF-8 text "
                              f"(byte {e.start})") from None
    with gc_paused():
        records = _records_in(path, text)
    if not records:
        raise RecordFileError(f"{path}: no records in it (an empty results file)")
    return records


def _records_in(path: Path, text: str) -> list[dict[str, Any]]:
    lines = text.split("\n")
    torn_last = not text.endswith("\n")  # the last element is an unterminated line
    records: list[dict[str, Any]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            if torn_last and lineno == len(lines) and records:
                break  # a sweep killed mid-write: the records before it are whole
            raise RecordFileError(f"{path} line {lineno}: not a results file: not JSON "
                                  f"({e.msg})") from None
        problem = check_record(obj)
        if problem:
            raise RecordFileError(f"{path} line {lineno}: {problem}")
        records.append(obj)
    return records


def check_for_resume(path: str | Path, run_id: str, config_ids: set[str]) -> list[str]:
    """The results file of a run about to be resumed, checked before anything in it is
    trusted: every line a record of ``run_id`` on one of ``config_ids`` (this plan's
    configurations). A torn last line (a kill mid-write: no newline at the end and not a
    whole record) is cut off so that the next record does not glue onto it; a whole record
    that only lacks its newline gets one. Returns what was done, one sentence each;
    :class:`RecordFileError` names the first other line that is not this run's record."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise RecordFileError(f"{path}: cannot read it: {e.strerror or e}") from None
    notes: list[str] = []
    body, sep, last = data.rpartition(b"\n")
    if last.strip():   # the file does not end with a newline
        if _as_record(last) is None:
            with open(path, "r+b") as fh:
                fh.truncate(len(body) + len(sep))
            notes.append(f"{path}: its last line was torn ({len(last)} bytes without a "
                         "newline, a sweep killed mid-write): cut off, that phase runs again")
            data = data[: len(body) + len(sep)]
        else:
            with open(path, "ab") as fh:
                fh.write(b"\n")
            data += b"\n"
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        obj = _as_record(line)
        if obj is None:
            raise RecordFileError(f"{path} line {lineno}: not a record of this run "
                                  f"({_what_is_wrong(line)}); move the file away or start "
                                  "a new run")
        if obj["run_id"] != run_id:
            raise RecordFileError(f"{path} line {lineno}: a record of run "
                                  f"{obj['run_id']!r}, not of {run_id!r}; a resumed file "
                                  "holds one run's records only")
        if obj["config_id"] not in config_ids:
            raise RecordFileError(f"{path} line {lineno}: configuration "
                                  f"{obj['config_id']!r} is not in this run's plan "
                                  f"({', '.join(sorted(config_ids))})")
    return notes


def _as_record(line: bytes) -> dict | None:
    try:
        obj = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return obj if check_record(obj) is None else None


def _what_is_wrong(line: bytes) -> str:
    try:
        obj = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except json.JSONDecodeError as e:
        return f"not JSON: {e.msg}"
    return check_record(obj) or "?"
