"""The report's view of records: configurations (``ConfigData``, over typed
``PhaseRecord``s) and their cells (``Cell``: the record that speaks for a table cell and
what its other documents and passes add), and how a configuration's dimensions are
spelled (``block=128``, ``unit=none``)."""
from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Iterable, NamedTuple, Sequence

from ..records.phase_record import CONFIG_FIELDS, NOT_IDENTITY, PhaseRecord, sha12
from ..names.verdict import CLEAN, SEVERITY, UNJUDGED, worst
from ..names.phase import phase_key
from ..records.recordkeys import cell_key, document_of, reference_cells
from ..names.isolation import IsolationName

__all__ = ["ConfigData", "Cell", "Disagreement", "group_configs", "combine_cell", "sha12", "fmt_percent", "miss_probability",
           "miss_sentence", "fmt_value", "describe_dim", "config_fields", "varying_fields",
           "DEFAULT_MODULUS", "VOLATILE", "SHORT_NAMES"]

DEFAULT_MODULUS = 128
# What a server reports about itself that changes from one server to the next: never a
# dimension of a configuration, never worth printing.
VOLATILE = frozenset({"port", "host", "api_key_required"})
SHORT_NAMES = {"block_size": "block", "prefix_match_unit": "unit", "draft_tokens": "k",
               "spec": "SPEC", "ctx": "CTX", "kv_cache_memory_bytes": "KV_MEM",
               "cudagraph_mode": "cudagraph", "prefix_caching": "prefix caching"}



def fmt_percent(p: float) -> str:
    pct = 100.0 * p
    if pct >= 10 or pct == 0:
        return f"{pct:.0f}%"
    if pct >= 1:
        return f"{pct:.1f}%".replace(".0%", "%")
    return f"{pct:.2f}%"


def miss_probability(covered: int, modulus: int) -> float:
    """Chance that a sweep of ``covered`` distinct residues misses one broken residue
    placed anywhere in ``modulus`` (uniformly): ``1 - covered / modulus``."""
    if modulus <= 0:
        return 0.0
    return max(0.0, 1.0 - covered / modulus)


def miss_sentence(covered: int, modulus: int) -> str:
    """The thread's sentence: ``5 of 128 residues sampled: a single broken residue would be
    missed 96% of the time.``"""
    p = miss_probability(covered, modulus)
    return (f"{covered} of {modulus} residues sampled: a single broken residue would be "
            f"missed {fmt_percent(p)} of the time.")


def fmt_value(name: str, value: Any) -> str:
    if value is None:
        return "none" if name == "prefix_match_unit" else "–"
    if isinstance(value, bool):
        return "on" if value else "off"
    if name == "kv_cache_memory_bytes" and isinstance(value, (int, float)):
        return f"{value / 1024 ** 3:.2f} GiB".replace(".00 GiB", " GiB")
    if name == "model":
        return shown_model(str(value))
    return str(value)


def shown_model(path: str) -> str:
    """A model as a report may show it, without the machine's own folders (issue 50: a
    report embedded ``/home/.../engine/lab/model``): this repository's own model from its
    ``engine/`` folder, a Hugging Face cache snapshot as its repository id, another local
    directory by its name; a model id (``Qwen/Qwen3-8B``) as it is."""
    p = PurePosixPath(path)
    if not p.is_absolute():
        return path
    parts = p.parts
    if "engine" in parts:
        return "/".join(parts[len(parts) - 1 - parts[::-1].index("engine"):])
    if "snapshots" in parts and parts.index("snapshots") > 0:
        repo = parts[parts.index("snapshots") - 1]
        if repo.startswith("models--"):
            return repo.removeprefix("models--").replace("--", "/")
    return p.name or path


def describe_dim(name: str, value: Any) -> str:
    """One configuration dimension as a reader says it: ``block=128``, ``unit=none``,
    ``FULL_AND_PIECEWISE``."""
    if name == "cudagraph_mode":
        return str(value)
    if name == "prefix_caching":
        return "prefix caching " + fmt_value(name, value)
    if name == "geometry":
        return str(value)
    return f"{SHORT_NAMES.get(name, name)}={fmt_value(name, value)}"


def config_fields(configs: Iterable[dict]) -> list[str]:
    seen: list[str] = [f for f in CONFIG_FIELDS]
    for c in configs:
        for k in c:
            if k not in seen and k not in NOT_IDENTITY:
                seen.append(k)
    return seen


def varying_fields(configs: list[dict]) -> list[str]:
    """Identity fields whose value is not the same in every configuration."""
    if len(configs) < 2:
        return []
    names = config_fields(configs)
    out = []
    for n in names:
        values = {repr(c.get(n)) for c in configs}
        if len(values) > 1:
            out.append(n)
    # method follows spec, so a spec change is one dimension, not two
    if "spec" in out and "method" in out:
        out.remove("method")
    return out


class Disagreement(NamedTuple):
    """A document of an auto cell whose reused-server and fresh-server verdicts differ
    (one ok, the other judged not ok)."""
    document: int
    reuse_verdict: str
    fresh_verdict: str
    reuse_pass: str            # the reused server's pass: ``restore`` or ``reset``


@dataclass(frozen=True)
class Cell:
    """One cell of the results table (``report/cells.py`` says it in words): the record
    that speaks for it and what its other records add. A cell of one record is that
    record alone."""

    record: PhaseRecord
    documents: tuple[int, int] | None = None   # (not ok, of) over several documents
    fresh: int = 0                 # documents judged on a fresh server (--isolation auto)
    disagree: tuple[Disagreement, ...] = ()
    reference: bool = False        # the answer others were judged against (recordkeys.reference_cells)
    isolations: tuple[str, ...] = ()   # of the records that speak for its documents

    @classmethod
    def of(cls, record: PhaseRecord | None) -> "Cell | None":
        """The cell of one record (None: not run)."""
        return None if record is None else cls(record)

    @property
    def verdict(self) -> str:
        return self.record.verdict

    @property
    def judged_by(self) -> str:
        """The isolation whose servers gave this cell its verdict: ``fresh`` only when a
        fresh server judged every document; else the weaker one(s) (``restore``, ``reset``,
        ``live`` ...), whose ok is not a fresh server's (docs/isolation.md)."""
        isos = set(self.isolations) or {self.record.isolation or "?"}
        weaker = sorted(isos - {"fresh"})
        return ", ".join(weaker) if weaker else "fresh"


@dataclass
class ConfigData:
    """One configuration of the report and its records (``PhaseRecord``s)."""

    config_id: str
    label: str
    config: dict
    requested: dict
    records: list[PhaseRecord] = field(default_factory=list)
    # cell_keys of the reference cells (--reference cold / first), over every
    # configuration of the group: the measure, not judged (records.recordkeys.reference_cells)
    references: frozenset = frozenset()

    @property
    def modulus(self) -> int:
        mods = [r.modulus for r in self.records if r.modulus]
        return int(Counter(mods).most_common(1)[0][0]) if mods else DEFAULT_MODULUS

    @property
    def residues(self) -> list[int]:
        return sorted({int(r.residue) for r in self.records if r.residue is not None})

    @property
    def phases(self) -> list[str]:
        return sorted({r.phase or "?" for r in self.records}, key=phase_key)

    @property
    def identity(self) -> dict:
        """The fields that define the configuration: those the sweep asked for
        (``requested_config``), else the known ServingConfig fields; not the extras the
        server reported (ports, pool sizes), which go in the effective configuration."""
        keys = [k for k in (self.requested or {}) if k not in NOT_IDENTITY]
        if not keys:
            keys = [k for k in CONFIG_FIELDS if k in self.config]
        return {k: self.config.get(k, self.requested.get(k)) for k in keys}

    def cell(self, residue: int, phase: str) -> Cell | None:
        return self._index().get((residue, phase))

    def table_cells(self) -> list[Cell]:
        """The table's cells: one per residue and phase, however many records speak."""
        return list(self._index().values())

    def _index(self) -> dict[tuple[int, str], Cell]:
        idx = getattr(self, "_idx", None)
        if idx is None:
            groups: dict[tuple, list[PhaseRecord]] = defaultdict(list)
            for r in self.records:
                groups[(int(r.residue), r.phase or "?")].append(r)
            idx = {k: combine_cell(v) for k, v in groups.items()}
            for k, c in idx.items():
                if cell_key(c.record) in self.references:
                    idx[k] = dataclasses.replace(c, reference=True)
            self._idx = idx
        return idx

    def point_status(self, residue: int) -> str:
        return self.statuses().get(residue, "ok")

    def statuses(self) -> dict[int, str]:
        """Each residue's status: the worst verdict of its phases, the reference cells
        left out (the cells judged against them decide)."""
        st = getattr(self, "_statuses", None)
        if st is None:
            by: dict[int, list[str]] = defaultdict(list)
            for (res, _), c in self._index().items():
                phases = by[res]   # a point whose every cell is a reference stays unjudged
                if not c.reference:
                    phases.append(c.verdict or "invalid")
            st = self._statuses = {res: worst(v) if v else "unjudged"
                                   for res, v in sorted(by.items())}
        return st

    def first(self, key: str, default: Any = None) -> Any:
        """The first set value of field ``key`` over the records."""
        for r in self.records:
            if getattr(r, key) not in (None, "", [], {}):
                return getattr(r, key)
        return default

    def distinct(self, key: str) -> list:
        out = []
        for r in self.records:
            v = getattr(r, key)
            if v not in (None, "") and v not in out:
                out.append(v)
        return out


def _severity(r: PhaseRecord) -> int:
    v = r.verdict or "invalid"
    return SEVERITY.index(v) if v in SEVERITY else 0


def combine_cell(records: list[PhaseRecord]) -> Cell:
    """One table cell from its records: one per document (``--seed`` lists) and, in an
    auto run, per pass. A document's verdict is its fresh record's where there is one (the
    standard), else its reused server's; the cell is the worst document, with
    ``documents`` (not ok, of) over several documents, ``fresh`` (documents judged on a
    fresh server) and ``disagree`` (documents where the reused and the fresh server's
    verdicts differ, one ok and the other judged not ok; an unjudged side compares with
    nothing)."""
    if len(records) == 1:
        return Cell(records[0])
    by_doc: dict[Any, dict[str, PhaseRecord]] = defaultdict(dict)
    for r in records:
        by_doc[document_of(r)][r.isolation or "?"] = r
    effective, disagree, fresh = [], [], 0
    for doc, passes in sorted(by_doc.items(), key=lambda kv: str(kv[0])):
        eff = passes.get("fresh") or next(iter(passes.values()))
        fresh += IsolationName.FRESH in passes and passes["fresh"].isolation_run == IsolationName.AUTO
        effective.append(eff)
        name = "restore" if IsolationName.RESTORE in passes else "reset"
        reuse, fr = passes.get(name), passes.get("fresh")
        # an unjudged answer is neither ok nor bad: nothing to disagree with (as in the
        # agreement line, report/auto.py)
        if (reuse and fr and UNJUDGED not in (reuse.verdict, fr.verdict)
                and (reuse.verdict in CLEAN) != (fr.verdict in CLEAN)):
            disagree.append(Disagreement(doc, reuse.verdict, fr.verdict, name))
    docs = ((sum(1 for r in effective if r.verdict not in CLEAN), len(effective))
            if len(effective) > 1 else None)
    return Cell(min(effective, key=_severity), docs, fresh, tuple(disagree),
                isolations=tuple(sorted({r.isolation or "?" for r in effective})))


def group_configs(recs: Sequence[PhaseRecord]) -> list[ConfigData]:
    """Records grouped by configuration, in the order configurations first appear."""
    out: dict[str, ConfigData] = {}
    refs = frozenset(reference_cells(recs))
    for r in recs:
        cid = r.config_id or r.config_label or "?"
        cd = out.get(cid)
        if cd is None:
            cd = out[cid] = ConfigData(
                config_id=cid, label=r.config_label or cid,
                config=dict(r.config or {}),
                requested=dict(r.requested_config or {}), references=refs)
        cd.records.append(r)
    return list(out.values())
