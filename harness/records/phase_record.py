"""The phase record (docs/records.md): its typed model and its schema version (the store
reads and writes it: ``store.py``; the builder a run makes them with:
``run/record_builder.py``).

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
from dataclasses import dataclass, field
from collections.abc import Iterable, Mapping
from typing import Any

from .record_check import gc_paused
from ..names.history import HistoryProof
from ..names.phase import PHASES
from ..names.verdict import VERDICTS

__all__ = ["SCHEMA_VERSION", "PhaseRecord", "CONFIG_FIELDS", "NOT_IDENTITY", "WRITTEN_WHEN_SET",
           "schema_of", "data_fields", "ServerBoot",
           "RecordsIn", "as_record", "typed", "record_identity", "sha12"]

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
# Fields written only when they have a value, so a record that predates them (or a run
# that does not use them) round-trips unchanged.
WRITTEN_WHEN_SET = frozenset({"document_seed", "isolation_run", "confirms", "server_boot",
                              "case_id", "prompt_sha1", "final_chunk", "modulus_why",
                              "load", "restore", "poison", "confirmed_on", "traffic", "history"})


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
    # --history (written only when set): what ran before the phase, and its proof
    history: HistoryProof | None = None
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
        return typed_view(ServerBoot, {"boot_s": self.boot_s, **self.server_boot})

    def as_dict(self) -> dict[str, Any]:
        """The record as written to a results file. A record read by ``from_dict`` comes
        back as it was read (its keys, in its order; the fields it lacked stay absent
        unless set since); a new one in the model's order, without the fields written
        only when set."""
        if not self._keys:
            return self._new_dict()
        known = {f.name for f in data_fields()}
        out = {k: _written(getattr(self, k)) if k in known else self.extra[k]
               for k in self._keys if k in known or k in self.extra}
        for f in data_fields():
            if f.name not in out and getattr(self, f.name) != self._filled.get(f.name):
                out[f.name] = _written(getattr(self, f.name))
        out.update((k, v) for k, v in self.extra.items() if k not in out)
        return out

    def _new_dict(self) -> dict[str, Any]:
        # an older schema's record built in memory stays as that schema wrote it: the
        # schema-3 fields it never had are not added
        old = self.schema_version < 3
        out = {f.name: _written(getattr(self, f.name)) for f in data_fields()
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
        if isinstance(known["history"], Mapping):   # typed: names/history.HistoryProof
            known["history"] = HistoryProof.from_dict(known["history"])
        rec = cls(**known, extra={k: v for k, v in d.items() if k not in known})
        rec._keys, rec._filled = tuple(d), filled
        return rec


def _written(value: Any) -> Any:
    """A field's value as a results file holds it (a typed part as its dict)."""
    return value.as_dict() if isinstance(value, HistoryProof) else value


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


# Records as a caller of a public entry point gives them: read from a file (dicts), built
# by a test or a script, or typed already. Only those entry points take it and hand it to
# ``typed`` (docs/architecture.md names them); every reader behind them takes PhaseRecords.
RecordsIn = Iterable[Mapping[str, Any] | PhaseRecord]


def as_record(r: Mapping[str, Any] | PhaseRecord) -> PhaseRecord:
    """A record as ``PhaseRecord`` (one already typed is returned as it is): ``typed``'s,
    one record at a time; no reader asks it (tests/harness/test_layout.py)."""
    return r if isinstance(r, PhaseRecord) else PhaseRecord.from_dict(r)


def typed(records: RecordsIn) -> list[PhaseRecord]:
    """Records as ``PhaseRecord``s (a record already typed is kept as it is)."""
    with gc_paused():   # an archive's records are many small objects and no cycle
        return [as_record(r) for r in records]


def typed_view(cls, d: Mapping[str, Any] | None):
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

    @classmethod
    def of(cls, notes: Mapping[str, Any] | None) -> "ServerBoot | None":
        """Boot notes as written (a server's facts hold them before any record does)
        read typed; None for none."""
        return typed_view(cls, notes)

    @property
    def fingerprint(self) -> Any:
        """The compile fingerprint the server booted with, as its notes say it (None: not
        recorded)."""
        return self.compile.get("fingerprint") if isinstance(self.compile, dict) else None


def schema_of(record: Mapping[str, Any]) -> int:
    """The schema version of a record as read: 1 for records written before the field."""
    return int(record.get("schema_version") or 1)


def record_identity(r: PhaseRecord) -> dict:
    """The fields that define a record's configuration: those asked for, else the known."""
    config = r.config or {}
    requested = r.requested_config or {}
    keys = [k for k in requested if k not in NOT_IDENTITY] or [
        k for k in CONFIG_FIELDS if k in config]
    return {k: config.get(k, requested.get(k)) for k in keys}


def sha12(record: PhaseRecord) -> str:
    """The first 12 hex of a record's answer sha1 (``–`` when it has none)."""
    return (record.sha1 or "")[:12] or "–"


