"""Results as pandas DataFrames: one row per phase cell, the configuration flattened.

    >>> from harness.results import frame
    >>> df = frame("reports/h200/results")            # a folder, a run id, or files
    >>> df[df.verdict != "ok"].groupby(["config.method", "config.draft_tokens", "residue"]).size()

``frame`` reads records through the typed readers of ``records/store.py`` (``.jsonl`` and
archived ``.jsonl.gz``, every line checked), keeps the latest record of each (run, cell) as
``sweep report`` does, and returns a DataFrame whose columns are

- the keys: ``run_id``, ``config_id``, ``config_label``, ``case_id``, ``document``,
  ``isolation`` (for an ``--isolation auto`` run the pass that wrote the record),
  ``isolation_run`` (``auto`` or empty), ``residue``, ``phase``; ``history`` (``none``
  unless ``--history``) and ``history_proven`` (on the phase the history ran at);
- ``verdict``, an *ordered* categorical worst first (``names/verdict.SEVERITY``), so
  ``df.groupby(...).verdict.min()`` is the worst verdict of a group; ``phase`` ordered as
  the phases run, ``isolation`` a categorical;
- what was measured (``templated_len``, ``prompt_tokens``, ``cached_tokens``, ``sha1``,
  ``verbatim_n``, ...: :data:`MEASURED`) and the build (``harness_version``,
  ``engine_version``, ``patches``, ``started_at``);
- the effective configuration the server booted with, one column per key, named
  ``config.KEY`` (a nested mapping ``config.KEY.SUB``; a list as its JSON text, so it groups).

pandas is imported when a frame is built, never by the CLI's start-up
(tests/harness/test_startup.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from .records.phase_record import PhaseRecord, RecordsIn, typed
from .records.recordkeys import document_of
from .records.store import load_records, resolve_sources
from .records.same_compile import fingerprint_of, gpu_models
from .names.isolation import ISOLATIONS
from .names.phase import PHASES
from .names.verdict import SEVERITY

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["frame", "record_rows", "KEYS", "MEASURED", "BUILD",
           "CONFIG_PREFIX"]

KEYS = ("run_id", "config_id", "config_label", "case_id", "document", "isolation",
        "isolation_run", "residue", "phase", "verdict")
MEASURED = ("modulus", "target_len", "templated_len", "prompt_tokens", "cached_tokens",
            "computed_tail", "final_chunk", "sha1", "reference_sha1", "verbatim_n",
            "verbatim_total", "repeats", "finish_reason", "completion_tokens", "tok_per_step",
            "latency_s", "boot_s", "reason", "reference", "slot", "node", "rerun")
BUILD = ("engine", "engine_version", "harness_version", "patches", "model", "started_at",
         "schema_version")
# issue 48: what a broken answer's bytes depend on (the server's compile and its GPUs)
SERVER = (("compile", fingerprint_of), ("gpu", gpu_models))
CONFIG_PREFIX = "config."
INTEGERS = ("modulus", "target_len", "templated_len", "prompt_tokens", "cached_tokens",
            "computed_tail", "final_chunk", "verbatim_n", "verbatim_total", "repeats",
            "completion_tokens", "schema_version")
# prose, not configuration: the presets' notes and the overrides' spelling
_NOT_CONFIG = frozenset({"notes", "overrides"})


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    # a record's configuration is parsed JSON: dict, not any Mapping (an ABC check per
    # value was 17 of 46 s of framing the H200 archive, profiled on the 2-core box)
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}", v, out)
    elif isinstance(value, (list, tuple)):
        out[prefix] = json.dumps(value, default=str)
    else:
        out[prefix] = value


def record_rows(records: Iterable[PhaseRecord]) -> list[dict[str, Any]]:
    """The rows of :func:`frame` as plain dicts (no pandas): keys, measured fields, build,
    then the flattened effective configuration."""
    rows = []
    for r in records:
        row: dict[str, Any] = {k: getattr(r, k) for k in KEYS if k != "document"}
        row["document"] = document_of(r)
        row["isolation_run"] = r.isolation_run or ""
        # --history: the configuration's (none when absent) and, on the phase it ran at,
        # whether its proof held (None elsewhere)
        row["history"] = (r.config or {}).get("history") or "none"
        row["history_proven"] = r.history.proven if r.history is not None else None
        row.update((k, getattr(r, k)) for k in MEASURED + BUILD)
        row.update((k, read(r)) for k, read in SERVER)
        for k, v in (r.config or {}).items():
            if k not in _NOT_CONFIG:
                _flat(CONFIG_PREFIX + k, v, row)
        rows.append(row)
    return rows


def _typed_columns(df: "pd.DataFrame") -> "pd.DataFrame":
    import pandas as pd
    df["verdict"] = pd.Categorical(df["verdict"], categories=list(SEVERITY), ordered=True)
    df["phase"] = pd.Categorical(df["phase"], categories=list(PHASES), ordered=True)
    extra = sorted(set(df["isolation"].dropna()) - set(ISOLATIONS))
    df["isolation"] = pd.Categorical(df["isolation"], categories=list(ISOLATIONS) + extra)
    for col in ("residue", "document"):
        df[col] = df[col].astype("int64")
    for col in INTEGERS:   # None where not measured: pandas' nullable integers, not floats
        df[col] = df[col].astype("Int64")
    return df


def frame(*sources: str | Path, out_dir: str | Path = "results",
          records: RecordsIn | None = None) -> "pd.DataFrame":
    """One row per phase cell of the runs named by ``sources`` (run ids looked up in
    ``out_dir``, results files, or folders of them), or of ``records`` already read;
    sorted by run, configuration, document, residue and phase. Raises ``StoreError`` for
    a source that is not a results file (naming the file and line)."""
    import pandas as pd
    if records is None:
        if not sources:
            raise TypeError("frame() needs a run id, a results file, a folder or records=")
        records = load_records(resolve_sources(sources, out_dir), out_dir)
    rows = record_rows(typed(records))
    columns = list(KEYS) + list(MEASURED) + list(BUILD) + [k for k, _ in SERVER]
    df = pd.DataFrame(rows, columns=columns + sorted({k for row in rows for k in row}
                                                     - set(columns)))
    if df.empty:
        return df
    df = _typed_columns(df)
    return df.sort_values(["run_id", "config_label", "case_id", "document", "residue",
                           "phase"], na_position="first", kind="stable").reset_index(drop=True)
