"""The run manifest's blocks typed (``RunManifest.configs``, ``backend``, ``prompts``,
``options``, ``explains`` and the other links ``RunManifest.link`` returns), beside
``manifest.py`` as ``gate_block.py`` and ``run_timing.py`` are. Each reads any manifest
losslessly: a key the model does not name is kept in ``extra``, and ``as_dict()`` gives
back what was read, key order included (a block built here, not read, writes its keys in
``ORDER``, the ``OPTIONAL`` ones only when set). A block is no mapping: readers name its
attributes (``tests/harness/test_manifest_blocks.py`` checks none indexes one by key).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .written import Block, typed_value, written_memory

__all__ = ["ConfigEntry", "RunBackend", "CaseFacts", "PromptsBlock", "RunFlags", "RunLink",
           "ExplainRung", "ExplainTarget", "ExplainsLink", "typed_configs"]


@dataclass(frozen=True)
class ConfigEntry(Block):
    """One configuration of ``RunManifest.configs``: its id, its label and the serving
    configuration as ``ServingConfig.as_dict()`` wrote it."""

    config_id: str | None = None
    config_label: str | None = None
    config: dict | None = None
    extra: dict = field(default_factory=dict)
    _keys: tuple | None = written_memory()

    ORDER = ("config_id", "config_label", "config")


@dataclass(frozen=True)
class RunBackend(Block):
    """``RunManifest.backend``: what the backend said of itself (its ``describe()``: ``local``,
    ``ray``'s cluster, ``live``'s server and request budget) and the launcher's
    (``run/launchers.py``: ``prefork``'s fork servers); each key only where its backend or
    launcher writes it."""

    backend: str | None = None          # local / ray / live
    slots: int | None = None            # ray, live: the slots it ran on
    # live (backends/live.py): the server, the requests sent of the budget, where the key
    # came from (never the key), what the server said of itself
    url: str | None = None
    requests: dict | None = None
    api_key_from: str | None = None
    server_report: dict | None = None   # run/live.read_server: what the server said of itself
    # ray (backends/ray.py): the cluster
    address: str | None = None
    nodes: int | None = None
    slot_resource: str | None = None
    ray_version: str | None = None
    # prefork (run/launchers.py): its fork server and the parents started beside it
    launcher: str | None = None
    fork_server: bool | None = None
    fork_server_import_s: float | None = None
    unavailable: str | None = None
    not_preloaded_cuda: list | None = None
    optional_failed: list | None = None
    more_fork_servers: list | None = None   # [{for, import_s}]
    fork_server_failures: list | None = None
    extra: dict = field(default_factory=dict)
    _keys: tuple | None = written_memory()

    ORDER = ("backend", "slots", "url", "requests", "api_key_from", "server_report",
             "address", "nodes", "slot_resource", "ray_version", "launcher", "fork_server",
             "fork_server_import_s", "unavailable", "not_preloaded_cuda", "optional_failed",
             "more_fork_servers", "fork_server_failures")
    OPTIONAL = frozenset(ORDER)


@dataclass(frozen=True)
class CaseFacts(Block):
    """One case of ``--prompts`` as the run planned it (``run/plan.py``): its line in the
    file, what was padded, whether it carries an ``expected`` answer, its digest (a
    ``--resume`` refuses a changed case), per configuration the padding unit and the
    templated length's span."""

    line: int | None = None
    pad: str | None = None
    expected: bool | None = None
    digest: str | None = None
    pad_unit: dict | None = None        # config_id -> the padding unit
    templated_len: dict | None = None   # config_id -> [shortest, longest]
    extra: dict = field(default_factory=dict)
    _keys: tuple | None = written_memory()

    ORDER = ("line", "pad", "expected", "digest", "pad_unit", "templated_len")


@dataclass(frozen=True)
class PromptsBlock(Block):
    """``RunManifest.prompts`` (``--prompts``): the file and, per case id, its facts."""

    file: str | None = None
    cases: dict | None = None           # case id -> CaseFacts
    extra: dict = field(default_factory=dict)
    _keys: tuple | None = written_memory()

    ORDER = ("file", "cases")
    NESTED = {"cases": (CaseFacts, "map")}


@dataclass(frozen=True)
class RunFlags(Block):
    """``RunManifest.options``: the run's sweep flags as ``settings/flag_manifest.flags_json``
    keeps them, ``{dest: value}`` in the flags' own spellings, and the block's version
    (``flag_manifest.FLAGS_VERSION``; a newer one is refused where it is read)."""

    version: int | None = None
    flags: dict | None = None
    extra: dict = field(default_factory=dict)
    _keys: tuple | None = written_memory()

    ORDER = ("version", "flags")


@dataclass(frozen=True)
class RunLink(Block):
    """A block naming another run (``RunManifest.link``): the run and its records file."""

    run_id: str | None = None
    results: str | None = None
    extra: dict = field(default_factory=dict)
    _keys: tuple | None = written_memory()

    ORDER = ("run_id", "results")


@dataclass(frozen=True)
class ExplainRung(Block):
    """One rung of an explained cell: its label and axis, and the configuration it ran
    (else the note saying why it could not)."""

    label: str | None = None
    axis: str | None = None
    config_id: str | None = None
    config_label: str | None = None
    note: str | None = None
    extra: dict = field(default_factory=dict)
    _keys: tuple | None = written_memory()

    ORDER = ("label", "axis", "config_id", "config_label", "note")
    OPTIONAL = frozenset({"config_id", "config_label", "note"})


@dataclass(frozen=True)
class ExplainTarget(Block):
    """One explained cell of the parent run and its rungs (``document`` is None in a target
    written before issue 23: it matches any document)."""

    config_id: str | None = None
    config_label: str | None = None
    residue: int | None = None
    document: int | None = None
    phases: dict | None = None          # explained phase -> the parent's verdict
    rungs: tuple[ExplainRung, ...] | None = None
    case_id: str | None = None          # --prompts: the case of the cell
    extra: dict = field(default_factory=dict)
    _keys: tuple | None = written_memory()

    ORDER = ("config_id", "config_label", "residue", "document", "phases", "rungs", "case_id")
    OPTIONAL = frozenset({"case_id"})
    NESTED = {"rungs": (ExplainRung, "list")}


@dataclass(frozen=True)
class ExplainsLink(RunLink):
    """``RunManifest.explains``: the parent run an explain run explains, the parent's
    document seeds, and the cells explained."""

    documents: list | None = None
    targets: tuple[ExplainTarget, ...] | None = None
    extra: dict = field(default_factory=dict)
    _keys: tuple | None = written_memory()

    ORDER = ("run_id", "results", "documents", "targets")
    NESTED = {"targets": (ExplainTarget, "list")}


def typed_configs(value: Any) -> Any:
    """``RunManifest.configs`` as read: a tuple of ``ConfigEntry`` (as read when it is not a
    list of objects)."""
    return typed_value((ConfigEntry, "list"), value)
