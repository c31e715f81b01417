"""The phase record (docs/records.md): its typed model, its schema version, its readers
(the builder a run writes them with: ``record_builder.py``).

A record is written as one JSON object per phase; ``PhaseRecord`` is that object typed.
``SCHEMA_VERSION`` is written into every new record; a record without one is a version-1
record (everything written before the field existed) and reads the same way, so old
results files and the committed archives load and render unchanged. Adding a field: add
it to ``PhaseRecord`` (with a default, so old records still load), its meaning to
``run/record_doc.FIELD_DOCS`` (docs/records.md's table is generated from both), and bump
``SCHEMA_VERSION`` only when the meaning of an existing field changes.
"""
from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable, Mapping
from typing import Any

from ..records.recordkeys import auto_pass, cell_key, document_of, point_key, value_of
from ..records.manifest import RunManifest, as_manifest
from ..records.record_check import gc_paused
from ..records.store import load_records, read_jsonl

from ..judge.vocabulary import (BUG_VERDICTS, CLEAN, EXPLAINED, JUDGED, NOT_FAILED, NOT_LONE, OPEN,
                                PHASES, SERVER_LOGGED, SEVERITY, UNANSWERED, UNTESTED, VERDICTS,
                                phase_key, verdict_info, worst)

__all__ = ["SCHEMA_VERSION", "PhaseRecord", "PHASES", "VERDICTS", "SEVERITY", "BUG_VERDICTS",
           "CLEAN", "EXPLAINED", "JUDGED", "NOT_FAILED", "NOT_LONE", "OPEN", "SERVER_LOGGED", "UNANSWERED", "UNTESTED", "verdict_info", "CONFIG_FIELDS", "NOT_IDENTITY", "phase_key", "worst", "schema_of",
           "data_fields", "ServerBoot", "RunTiming", "PassTiming", "BootSplit", "as_record", "typed", "read_phase_records", "read_jsonl_records", "load_phase_records",
           "latest_records", "reference_cells", "cell_key", "point_key", "document_of", "auto_pass", "record_identity", "sha12", "mismatches", "failure_fields", "timing_record", "by_node"]

# 3: the cold phase under --reference cold is `unjudged` (was `ok`), a collapse is measured
#    against the reference's length, an unproven hit is `invalid`; new fields
#    first_divergence, reference_chars, token_logprobs, intended_tail, tail_note.
# 4: ``isolation`` may be ``restore``, also as the first pass of an ``--isolation auto`` run
#    (which was always ``reset``); ``confirms`` may be ``not ok on restore``; new field
#    ``restore`` (how the point's server was returned to its just-booted state, proven).
# 5: a phase on a server the sweep does not own (``--url``) that matched its reference
#    but was not shown to run alone is ``not-lone`` (was ``ok``); new field ``traffic``
#    (what /metrics said the server ran around the phase: run/traffic.py).
SCHEMA_VERSION = 5
# Identity fields of a configuration in the order a reader wants them; anything else a
# config dict carries is shown after these.
CONFIG_FIELDS = ("engine", "model", "geometry", "spec", "method", "draft_tokens", "ctx",
                 "cudagraph_mode", "prefix_caching", "block_size", "prefix_match_unit",
                 "max_model_len", "kv_cache_memory_bytes", "patches")
NOT_IDENTITY = frozenset({"notes", "overrides"})
# Fields a record carries only when they apply (records of other runs stay as they were).
SCHEMA3_FIELDS = frozenset({"reference_chars", "first_divergence", "token_logprobs",
                            "intended_tail", "tail_note"})
# Fields compared between requested and effective configuration.
COMPARED = ("cudagraph_mode", "prefix_caching", "block_size", "prefix_match_unit",
            "max_model_len", "method", "draft_tokens")


def mismatches(requested: dict[str, Any], effective: dict[str, Any]) -> list[str]:
    out = []
    for key in COMPARED:
        if key in effective and effective.get(key) != requested.get(key):
            out.append(f"{key}: requested {requested.get(key)!r}, server runs {effective.get(key)!r}")
    return out


# Fields written only when they have a value, so a record that predates them (or a run
# that does not use them) round-trips unchanged.
WRITTEN_WHEN_SET = frozenset({"document_seed", "isolation_run", "confirms", "server_boot",
                              "case_id", "prompt_sha1", "final_chunk", "modulus_why",
                              "load", "restore", "poison", "confirmed_on", "traffic"})


@dataclass
class PhaseRecord:
    """One phase of one data point, in the key order the JSONL has always had."""

    run_id: str
    harness_version: str
    config_id: str
    config_label: str
    config: dict
    requested_config: dict
    config_mismatch: list[str]
    engine: str
    engine_version: str | None
    patches: str | None
    patch_status: dict | None
    model: str | None
    slot: str
    node: str
    isolation: str
    residue: int
    modulus: int
    target_len: int
    templated_len: int
    templated_len_source: str
    phase: str
    reference: str
    boot_s: float | None
    started_at: str
    rerun: str
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    computed_tail: int | None = None
    answer: str = ""
    content_was_null: bool = False
    sha1: str | None = None
    reference_sha1: str | None = None
    # every record written has these; one read without them (another tool's, a sparse
    # one) was not measured there: None, not a count of 0
    expected_chars: int | None = None
    verbatim_n: int | None = None
    verbatim_total: int | None = None
    repeats: int | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None
    tok_per_step: float | None = None
    latency_s: float | None = None
    verdict: str = "invalid"
    reason: str | None = None
    log_excerpt: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    # the document the prompt was cut from (--seed lists); None in records written before
    document_seed: int | None = None
    # --isolation auto: "auto" (``isolation`` then says which pass, reset or fresh, produced
    # the record, and ``confirms`` why a fresh point ran); None otherwise
    isolation_run: str | None = None
    confirms: str | None = None
    # how this record's server booted (launcher, shared caches hit/miss, boot split), when known
    server_boot: dict | None = None
    # --prompts: the case and the sha1 of its messages as sent (written only when set)
    case_id: str | None = None
    prompt_sha1: str | None = None
    # --isolation restore (and auto's restore pass): how this point's server was returned
    # to its just-booted state and what proved it (harness/serve/restore.py), or which step failed
    restore: dict | None = None
    # --poison (harness/serve/poison.py): off (and why), or what was filled and each fill's proof
    poison: dict | None = None
    # --isolation auto, a fresh point not ok somewhere: every fresh server's verdict and sha1
    # (run/auto.settle); the record is the worst server's
    confirmed_on: list | None = None
    # schema 3 (docs/records.md); absent from older records, which load with these defaults
    reference_chars: int | None = None
    first_divergence: dict | None = None
    token_logprobs: list | None = None
    intended_tail: int | None = None
    tail_note: str | None = None
    # written only when set (docs/shapes.md): the final prefill chunk the measured tail
    # ends in under the effective chunk budget; why the modulus is what it is
    # (``--modulus auto``); ``--load``: what ran beside the measured request
    final_chunk: int | None = None
    modulus_why: str | None = None
    load: dict | None = None
    # schema 5, on every phase that got an answer (written only when set): the other
    # requests /metrics showed the server holding around the phase (run/traffic.py)
    traffic: dict | None = None
    # written only when set (docs/records.md): the server's /tokenize failed, Ray facts;
    # and every key of a record read from a file that this model does not name
    extra: dict = field(default_factory=dict)
    # a record read by ``from_dict``: its keys in the file's order, and the values it was
    # given for the fields it lacked, so ``as_dict`` writes back exactly what was read
    _keys: tuple = field(default=(), init=False, repr=False, compare=False)
    _filled: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}; allowed: {', '.join(VERDICTS)}")
        if self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r}; allowed: {', '.join(PHASES)}")

    @property
    def boot(self) -> ServerBoot | None:
        """``server_boot`` typed (None when the record has none); its ``boot_s`` falls back
        to the record's."""
        if not isinstance(self.server_boot, Mapping):
            return None
        return _view(ServerBoot, {"boot_s": self.boot_s, **self.server_boot})

    def as_dict(self) -> dict[str, Any]:
        """The record as written to a results file. A record read by ``from_dict`` comes
        back as it was read (its keys, in its order; the fields it lacked stay absent
        unless set since); a new one in the model's order, without the fields written
        only when set."""
        if not self._keys:
            return self._new_dict()
        known = {f.name for f in data_fields()}
        out = {k: getattr(self, k) if k in known else self.extra[k]
               for k in self._keys if k in known or k in self.extra}
        for f in data_fields():
            if f.name not in out and getattr(self, f.name) != self._filled.get(f.name):
                out[f.name] = getattr(self, f.name)
        out.update((k, v) for k, v in self.extra.items() if k not in out)
        return out

    def _new_dict(self) -> dict[str, Any]:
        # an older schema's record built in memory stays as that schema wrote it: the
        # schema-3 fields it never had are not added
        old = self.schema_version < 3
        out = {f.name: getattr(self, f.name) for f in data_fields()
               if not (f.name in WRITTEN_WHEN_SET and getattr(self, f.name) is None)
               and not (old and f.name in SCHEMA3_FIELDS and getattr(self, f.name) is None)}
        out.update(self.extra)
        return out

    def replaced(self, **changes: Any) -> "PhaseRecord":
        """A copy written as ``{**self.as_dict(), **changes}`` (a field or a key the model
        does not name alike); ``self`` is left as it was."""
        return PhaseRecord.from_dict({**self.as_dict(), **changes})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PhaseRecord":
        """A record as read from a results file, of any schema version: a field it lacks
        gets its default (None where the model has none; ``schema_version`` 1, what a
        record without it is), a key the model does not name goes to ``extra``."""
        fields = data_fields()
        filled = {f.name: _absent(f, d) for f in fields if f.name not in d}
        known = {f.name: d.get(f.name, filled.get(f.name)) for f in fields}
        rec = cls(**known, extra={k: v for k, v in d.items() if k not in known})
        rec._keys, rec._filled = tuple(d), filled
        return rec


@functools.cache
def data_fields() -> tuple[dataclasses.Field, ...]:
    """The fields of ``PhaseRecord`` that are keys of a record (not ``extra``, not the
    private memory of what was read); the class does not change, so they are listed once
    (every record read asked for them: ~8% of reading a large results file)."""
    return tuple(f for f in dataclasses.fields(PhaseRecord)
                 if f.name != "extra" and not f.name.startswith("_"))


def _absent(f: dataclasses.Field, d: Mapping[str, Any]) -> Any:
    """What a record read without field ``f`` holds in it."""
    if f.name == "schema_version":
        return schema_of(d)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def as_record(r: Mapping[str, Any] | PhaseRecord) -> PhaseRecord:
    """A record as ``PhaseRecord`` (one already typed is returned as it is)."""
    return r if isinstance(r, PhaseRecord) else PhaseRecord.from_dict(r)


def typed(records: Iterable[Mapping[str, Any] | PhaseRecord]) -> list[PhaseRecord]:
    """Records as ``PhaseRecord``s (a record already typed is kept as it is)."""
    with gc_paused():   # an archive's records are many small objects and no cycle
        return [as_record(r) for r in records]


def read_phase_records(path: str | Path) -> list[PhaseRecord]:
    """The typed records of one results file (``.jsonl`` / ``.jsonl.gz``), checked line by
    line (``record_check``: a line that is not a record raises ``RecordFileError``)."""
    from ..records.record_check import read_record_file
    return typed(read_record_file(path))


def read_jsonl_records(path: str | Path) -> list[PhaseRecord]:
    """``store.read_jsonl`` typed: one results file as a run's store reads it back (a torn
    last line skipped, nothing else checked)."""
    return typed(read_jsonl(path))


def load_phase_records(refs: Iterable[str | Path], out_dir: str | Path = "results"
                       ) -> list[PhaseRecord]:
    """``store.load_records`` typed: the records of several results files / run ids, the
    last of each (run, cell) kept."""
    return typed(load_records(refs, out_dir))


def _view(cls, d: Mapping[str, Any] | None):
    """A typed view ``cls`` of a mapping as written: the keys it names, the rest in
    ``extra``; None for no mapping."""
    if not isinstance(d, Mapping):
        return None
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    return cls(**{k: v for k, v in d.items() if k in names},
               extra={k: v for k, v in d.items() if k not in names})


@dataclass(frozen=True)
class ServerBoot:
    """How a record's server booted (its ``server_boot``, docs/records.md), read typed:
    ``PhaseRecord.boot``. ``boot_s`` is the notes' own, else the record's."""

    log: str | None = None                 # the server's log file: one per server
    launcher: str | None = None            # plain / forked
    boot_s: float | None = None
    fallback_reason: str | None = None     # why not forked
    split: dict | None = None              # vLLM: seconds per boot stage (engine/vllm/bootlog)
    compile_cache: str | None = None       # vLLM: hit / miss / mixed
    cache_dir: str | None = None           # --cache-dir
    cache_dir_shared: bool | None = None
    attempts: int | None = None            # boots tried when not 1 (0: never started)
    failed_attempts: list | None = None    # the reasons of the boots that failed first
    gpu: list | None = None                # issue 48: per GPU index, model, uuid (gpu_info)
    compile: dict | None = None            # issue 48: the compile fingerprint and its source
    extra: dict = field(default_factory=dict)   # what else the engine's boot notes said


@dataclass(frozen=True)
class PassTiming:
    """One ``--isolation auto`` pass of a manifest's ``timing.passes``."""

    points: int | None = None
    sum_boot_s: float | None = None
    median_boot_s: float | None = None
    median_requests_s: float | None = None
    restored_points: int | None = None
    median_restore_s: float | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class BootSplit:
    """A manifest's ``timing.boot_split``: how its servers started (``run.driver.boot_summary``)."""

    servers: int | None = None
    launchers: dict = field(default_factory=dict)        # launcher -> servers
    fallback_reasons: list = field(default_factory=list)
    compile_cache: dict = field(default_factory=dict)    # hit / miss / mixed -> servers
    median_s: dict = field(default_factory=dict)         # boot stage -> median seconds
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunTiming:
    """Where a run's wall time went: a manifest's ``timing`` (``run.driver.timing_summary``)
    read typed, with its auto passes and its servers' boot split."""

    wall_s: float | None = None
    slots: int | None = None
    points: int | None = None
    median_boot_s: float | None = None
    passes: dict = field(default_factory=dict)   # pass name -> PassTiming
    all_fresh_estimate_s: float | None = None    # auto: every reuse point run fresh
    ratio_to_all_fresh: float | None = None
    boot_split: BootSplit | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def of(cls, manifest: Mapping[str, Any] | RunManifest | None) -> "RunTiming":
        """The timing of a run manifest, as read or typed (empty for one without: an
        interrupted run)."""
        t = dict((as_manifest(manifest).timing if manifest else None) or {})
        passes = dict(t.pop("passes", None) or {})
        estimate = {k: passes.pop(k) for k in ("all_fresh_estimate_s", "ratio_to_all_fresh")
                    if k in passes}
        split = t.pop("boot_split", None)
        return cls(**{k: v for k, v in t.items() if k in _RUN_TIMING},
                   passes={k: _view(PassTiming, p) for k, p in passes.items() if p},
                   boot_split=_view(BootSplit, split) if split else None,
                   extra={k: v for k, v in t.items() if k not in _RUN_TIMING}, **estimate)


_RUN_TIMING = frozenset({"wall_s", "slots", "points", "median_boot_s"})


def schema_of(record: Mapping[str, Any]) -> int:
    """The schema version of a record as read: 1 for records written before the field."""
    return int(record.get("schema_version") or 1)


def failure_fields(verdict: str, reason: str, excerpt: list, expected_chars: int) -> dict:
    """The measured fields of a phase that produced no answer (boot-fail, crash, ...)."""
    return {"prompt_tokens": None, "cached_tokens": None, "computed_tail": None,
            "answer": "", "content_was_null": False, "sha1": None,
            "reference_sha1": None, "expected_chars": expected_chars,
            "verbatim_n": 0, "verbatim_total": 0, "repeats": 0, "finish_reason": None,
            "completion_tokens": None, "tok_per_step": None, "latency_s": None,
            "verdict": verdict, "reason": reason, "log_excerpt": list(excerpt)}


def timing_record(*, boot: float = 0.0, requests: float = 0.0, teardown: float = 0.0,
                  point: float | None = None) -> dict[str, float]:
    """Where one point's time went (the driver sums these into the manifest's timing);
    a restored point adds ``restore`` (the seconds its server took to be restored)."""
    t = {"boot": boot, "requests": requests, "teardown": teardown}
    if point is not None:
        t["point"] = point
    return t


def reference_cells(records: Iterable[Any]) -> set[tuple]:
    """The ``cell_key``s of the unjudged answers that are a reference: some judged answer
    (ok, diverged, broken) of the same prompt (residue, document, case) was judged against
    them (its ``reference_sha1`` is their sha1). Under ``--reference cold`` those are the
    cold cells whose hits were judged, under ``first`` the first configuration's cells.
    Such a cell is the measure, not a measurement: the gate and the report count the
    cells judged against it, and say which cells were the reference. Dicts or
    ``PhaseRecord``s alike."""
    recs = list(records)
    prompt = lambda r, sha: (value_of(r, "residue"), document_of(r),  # noqa: E731
                             value_of(r, "case_id"), sha)
    used = {prompt(r, value_of(r, "reference_sha1")) for r in recs
            if value_of(r, "verdict") in JUDGED and value_of(r, "reference_sha1")
            and value_of(r, "reference") in ("cold", "first")}   # judged against a cell
    return {cell_key(r) for r in recs
            if value_of(r, "verdict") in OPEN and value_of(r, "sha1")
            and prompt(r, value_of(r, "sha1")) in used}


def latest_records(records: Iterable[Any]) -> tuple[list[Any], int]:
    """One record per cell (``cell_key``: configuration, case, residue, phase, document,
    auto pass): the latest by ``started_at`` (so a report over several runs shows the
    newest measurement). Returns (records, superseded); dicts or ``PhaseRecord``s alike."""
    best: dict[tuple, dict] = {}
    n = 0
    for r in records:
        n += 1
        key = cell_key(r)
        old = best.get(key)
        if old is None or (value_of(r, "started_at") or "") >= (value_of(old, "started_at") or ""):
            best[key] = r
    return list(best.values()), n - len(best)


def record_identity(r: PhaseRecord) -> dict:
    """The fields that define a record's configuration: those the sweep asked for
    (``requested_config``), else the known ServingConfig fields."""
    config = r.config or {}
    requested = r.requested_config or {}
    keys = [k for k in requested if k not in NOT_IDENTITY] or [
        k for k in CONFIG_FIELDS if k in config]
    return {k: config.get(k, requested.get(k)) for k in keys}


def sha12(record: Any) -> str:
    """The first 12 hex of a record's answer sha1 (``–`` when it has none); a dict or a
    ``PhaseRecord``."""
    return (value_of(record, "sha1") or "")[:12] or "–"


def by_node(records: Iterable[Any]) -> dict[str, Counter]:
    """Verdict counts per node (every record has ``node``): ``{"gpu-07/10.0.0.17/3590ecc1":
    Counter(ok=30, broken=2)}``. The report's "By node" section and the Ray backend's
    summary both read it, so it lives with the records, below both. Dicts (the backend's)
    or ``PhaseRecord``s (the report's)."""
    out: dict[str, Counter] = {}
    for r in records:
        out.setdefault(str(value_of(r, "node") or "?"), Counter())[
            str(value_of(r, "verdict") or "invalid")] += 1
    return dict(sorted(out.items()))
