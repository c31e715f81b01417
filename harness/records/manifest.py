"""The run manifest (``<run-id>.manifest.json``, docs/records.md "Manifest") typed and
versioned: ``RunManifest`` mirrors what ``records/phase_record.PhaseRecord`` is to a phase record.

``run/driver.Driver`` is its only writer: it builds a ``RunManifest`` when a run starts
and updates its attributes as the run goes (``plan``, ``ended_at``, ``timing``,
``exit_code``, ...); ``store.ResultStore.write_manifest`` writes ``as_dict()``. Every
reader (the report, ``sweep explain``, ``--resume``, the flags read back) reads
attributes, not keys, and takes a manifest as read or typed (``as_manifest``); its blocks
are typed too (``gate_block.py``, ``run_timing.py``, ``manifest_blocks.py``: the
configurations, the backend, the prompts, the options, the links), a block whose value is
not the JSON object it should be is kept as read.

``MANIFEST_VERSION`` is written into every new manifest; a manifest without it is a
version-1 manifest (everything written before the field existed, the committed archives
among them) and reads the same way. ``from_dict`` accepts every version up to
``MANIFEST_VERSION`` and refuses a newer one in one line (``StoreError``); a key the model
does not name is kept in ``extra``, and ``as_dict()`` gives back exactly what was read,
key order included: the keys a manifest lacked are not added unless set since. Adding a
key: a field here (default None), a line in docs/records.md's manifest table
(``tests/harness/test_run_manifest.py`` checks every field is there), and, when it is
written only when it applies, its name in ``WRITTEN_WHEN_SET``; when it holds an object, a
model in ``manifest_blocks.py`` and a row of ``_BLOCKS``. Bump ``MANIFEST_VERSION``
only when the meaning of an existing key changes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..errors import StoreError
from .gate_block import BaselineBlock
from .manifest_blocks import (ConfigEntry, ExplainsLink, PromptsBlock, RunBackend, RunFlags,
                              RunLink, typed_configs)
from .run_timing import RunPlan, RunTiming

__all__ = ["MANIFEST_VERSION", "WRITTEN_WHEN_SET", "RunManifest", "manifest_fields",
           "version_of", "as_manifest", "typed_manifests"]

# 2: the field ``manifest_version`` itself (version 1: every manifest written before it;
#    their keys mean what they meant)
MANIFEST_VERSION = 2

# keys a new manifest carries only when they apply (None is not written: the key is absent)
WRITTEN_WHEN_SET = frozenset({"options", "cache_dir", "auto_sample", "explains", "prompts",
                              "plan", "wall_s", "backend", "timing", "baseline"})


@dataclass
class RunManifest:
    """One run's manifest, its keys in the order the driver writes them."""

    run_id: str | None = None
    manifest_version: int = MANIFEST_VERSION
    command: str | None = None            # argv as a shell line, ``sweep`` first
    options: RunFlags | None = None       # settings/flag_manifest.flags_json (versioned)
    harness_version: str | None = None
    engine: str | None = None
    host: str | None = None
    started_at: str | None = None
    ended_at: str | None = None           # null while running / when interrupted
    configs: tuple[ConfigEntry, ...] | None = None   # [{config_id, config_label, config}]
    residues: list | None = None
    modulus: int | str | None = None      # an int, or "auto"
    phases: list | None = None
    isolation: str | None = None
    reference: str | None = None
    context: str | None = None
    slots: list | None = None
    gpus: dict | None = None              # issue 48: {slot id: its GPUs as nvidia-smi names them}
    sampled: dict[str, str] | str | None = None   # {config_id: note}; older: a text
    planning_s: float | None = None
    interrupted: bool | None = None
    exit_code: int | None = None
    documents: list | None = None         # the document seeds measured
    launcher: str | None = None
    cache_dir: str | None = None          # --cache-dir
    auto_sample: int | None = None        # --isolation auto: residues confirmed fresh
    explains: ExplainsLink | None = None  # sweep explain: the parent run (a link)
    prompts: PromptsBlock | None = None   # --prompts: {file, cases}
    plan: RunPlan | None = None           # {points, by_config: {config_id: {pass: n}}}
    wall_s: float | None = None
    backend: RunBackend | None = None     # the backend's describe() (+ the launcher's)
    timing: RunTiming | None = None       # run/driver.timing_summary, typed
    baseline: BaselineBlock | None = None   # --baseline: publish/gate.gate_block (typed)
    # every key of a manifest read that this model does not name (another link, a
    # benchmark's own keys), and a new manifest's links other than ``explains``
    extra: dict = field(default_factory=dict)
    # a manifest read by ``from_dict``: its keys in the file's order, and the values given
    # to the fields it lacked, so ``as_dict`` writes back exactly what was read
    _keys: tuple = field(default=(), init=False, repr=False, compare=False)
    _filled: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def did_not_finish(self) -> bool:
        """The run was interrupted, or it started and has no end date (killed)."""
        return bool(self.interrupted or (self.started_at and not self.ended_at))

    @property
    def explained_run(self) -> str | None:
        """The run id an explain run explains (its ``explains`` link; None for any other)."""
        return self.explains.run_id if isinstance(self.explains, ExplainsLink) else None

    def link(self, name: str) -> RunLink | None:
        """A link block (``explains``, or one kept in ``extra``, typed as ``RunLink``) when
        it is one (None for a value that is not a JSON object)."""
        block = getattr(self, name) if name in _NAMES else self.extra.get(name)
        if isinstance(block, Mapping):
            return RunLink.from_dict(block)
        return block if isinstance(block, RunLink) else None

    def as_dict(self) -> dict[str, Any]:
        """The manifest as written. One read by ``from_dict`` comes back as it was read
        (its keys, in its order; the keys it lacked stay absent unless set since); a new
        one in the model's order, without the keys written only when set."""
        if not self._keys:
            out = {f.name: getattr(self, f.name) for f in manifest_fields()
                   if not (f.name in WRITTEN_WHEN_SET and getattr(self, f.name) is None)}
            out.update(self.extra)
            return _blocks_written(out)
        out = {k: getattr(self, k) if k in _NAMES else self.extra[k]
               for k in self._keys if k in _NAMES or k in self.extra}
        for f in manifest_fields():
            value = getattr(self, f.name)
            if f.name not in out and value != self._filled.get(f.name):
                out[f.name] = value
        out.update((k, v) for k, v in self.extra.items() if k not in out)
        return _blocks_written(out)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "") -> "RunManifest":
        """A manifest as read, of any version up to ``MANIFEST_VERSION`` (``StoreError``
        for a newer one or for something that is not a JSON object; ``where`` names the
        file in the message): a key it lacks reads as None (``manifest_version`` 1),
        a key the model does not name goes to ``extra``."""
        if not isinstance(d, Mapping):
            raise StoreError(f"{where or 'manifest'}: not a run manifest (a JSON "
                             f"{type(d).__name__})")
        version = version_of(d, where)
        filled = {f.name: (version if f.name == "manifest_version" else None)
                  for f in manifest_fields() if f.name not in d}
        known = {f.name: d.get(f.name, filled.get(f.name)) for f in manifest_fields()}
        for key, block in _BLOCKS:
            if isinstance(known[key], Mapping):
                known[key] = block.from_dict(known[key])
        known["configs"] = typed_configs(known["configs"])
        m = cls(**known, extra={k: v for k, v in d.items() if k not in _NAMES})
        m._keys, m._filled = tuple(d), filled
        return m


# the keys whose value is typed when it is a JSON object (``configs``: a list of them)
_BLOCKS = (("baseline", BaselineBlock), ("timing", RunTiming), ("plan", RunPlan),
           ("options", RunFlags), ("backend", RunBackend), ("prompts", PromptsBlock),
           ("explains", ExplainsLink))


def _blocks_written(out: dict[str, Any]) -> dict[str, Any]:
    """A manifest's typed blocks as their JSON (``baseline``, ``timing``, ``plan``,
    ``options``, ``backend``, ``prompts``, ``explains``, ``configs``, a link in ``extra``)."""
    for key, value in out.items():
        if isinstance(value, (*(cls for _, cls in _BLOCKS), RunLink)):
            out[key] = value.as_dict()
    configs = out.get("configs")
    if isinstance(configs, tuple) and all(isinstance(c, ConfigEntry) for c in configs):
        out["configs"] = [c.as_dict() for c in configs]
    return out


def manifest_fields() -> tuple[dataclasses.Field, ...]:
    """The fields of ``RunManifest`` that are keys of a manifest (not ``extra``, not the
    private memory of what was read)."""
    return tuple(f for f in dataclasses.fields(RunManifest)
                 if f.name != "extra" and not f.name.startswith("_"))


_NAMES = frozenset(f.name for f in manifest_fields())


def version_of(d: Mapping[str, Any], where: str = "") -> int:
    """The version of a manifest as read: 1 without the key; ``StoreError`` in one line
    for a version newer than this harness reads, or one that is not a number."""
    raw = d.get("manifest_version")
    try:
        version = int(raw or 1)
    except (TypeError, ValueError):
        raise StoreError(f"{where or 'manifest'}: manifest_version {raw!r} is not a "
                         "number") from None
    if version > MANIFEST_VERSION:
        raise StoreError(f"{where or 'manifest'}: a version-{version} run manifest, newer "
                         f"than this harness reads ({MANIFEST_VERSION}); upgrade residue-lab")
    return version


def as_manifest(m: Mapping[str, Any] | RunManifest) -> RunManifest:
    """A manifest as ``RunManifest`` (one already typed is returned as it is)."""
    return m if isinstance(m, RunManifest) else RunManifest.from_dict(m)


def typed_manifests(manifests: Iterable[Mapping[str, Any] | RunManifest | None] | None
                    ) -> list[RunManifest]:
    """Manifests as read or typed, the empty ones (None, ``{}``) left out, as
    ``RunManifest``s: what each report entry point does once with what it is given."""
    return [as_manifest(m) for m in (manifests or []) if m]
