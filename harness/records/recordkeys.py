"""What identifies a record: its cell (configuration, case, residue, phase, document,
auto pass) and its data point (resume), and the readings of a set of records that rest on
them (the latest record of each cell, the reference cells, the verdicts per node).
``case_id`` is None outside --prompts, the document 0 (or the ``--seed`` of the rerun
command) for a record written before documents were an axis, the auto pass None outside
--isolation auto: an old record keys as it always did, with those defaults. One place for
the store, the report, compare and resume; every function takes ``PhaseRecord``s (the
store hands out nothing else)."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from ..names.verdict import JUDGED, OPEN
from ..names.isolation import IsolationName
from .phase_record import PhaseRecord

__all__ = ["document_of", "auto_pass", "cell_key", "point_key", "latest_records",
           "reference_cells", "by_node"]

_SEED_ARG = re.compile(r"--seed (\d+)\b")


def document_of(r: PhaseRecord) -> int:
    """The document seed of a record; for one written before the field, the ``--seed``
    of its rerun command (its run's one seed), else 0."""
    if r.document_seed is not None:
        return int(r.document_seed)
    m = _SEED_ARG.search(str(r.rerun or ""))
    return int(m[1]) if m else 0


def auto_pass(r: PhaseRecord) -> str | None:
    """``reset`` / ``fresh`` for a record of an ``--isolation auto`` run, else None."""
    return r.isolation if r.isolation_run == IsolationName.AUTO else None


def cell_key(r: PhaseRecord) -> tuple:
    """What one measured cell is: (configuration, case, residue, phase, document, auto
    pass)."""
    return (r.config_id or r.config_label, r.case_id, r.residue, r.phase, document_of(r),
            auto_pass(r))


def point_key(r: PhaseRecord) -> tuple:
    """The ``plan.Point.key`` a record belongs to (resume): (config_id, case, residue,
    document, auto pass or "")."""
    return (r.config_id, r.case_id, r.residue, document_of(r), auto_pass(r) or "")


def reference_cells(records: Iterable[PhaseRecord]) -> set[tuple]:
    """The ``cell_key``s of the unjudged answers that are a reference: some judged answer
    (ok, diverged, broken) of the same prompt (residue, document, case) was judged against
    them (its ``reference_sha1`` is their sha1). Under ``--reference cold`` those are the
    cold cells whose hits were judged, under ``first`` the first configuration's cells.
    Such a cell is the measure, not a measurement: the gate, bisect and the report count
    the cells judged against it, and say which cells were the reference."""
    recs = list(records)
    used = {_prompt(r, r.reference_sha1) for r in recs
            if r.verdict in JUDGED and r.reference_sha1
            and r.reference in ("cold", "first")}   # judged against a cell
    return {cell_key(r) for r in recs
            if r.verdict in OPEN and r.sha1 and _prompt(r, r.sha1) in used}


def _prompt(r: PhaseRecord, sha: str | None) -> tuple:
    """One prompt's answer: (residue, document, case, sha1)."""
    return (r.residue, document_of(r), r.case_id, sha)


def latest_records(records: Iterable[PhaseRecord]) -> tuple[list[PhaseRecord], int]:
    """One record per cell (``cell_key``: configuration, case, residue, phase, document,
    auto pass): the latest by ``started_at`` (so a report over several runs shows the
    newest measurement). Returns (records, superseded)."""
    best: dict[tuple, PhaseRecord] = {}
    n = 0
    for r in records:
        n += 1
        key = cell_key(r)
        old = best.get(key)
        if old is None or (r.started_at or "") >= (old.started_at or ""):
            best[key] = r
    return list(best.values()), n - len(best)


def by_node(records: Iterable[PhaseRecord]) -> dict[str, Counter]:
    """Verdict counts per node (every record has ``node``): ``{"gpu-07/10.0.0.17/3590ecc1":
    Counter(ok=30, broken=2)}``. The report's "By node" section and the Ray backend's
    summary both read it, so it lives with the records, below both."""
    out: dict[str, Counter] = {}
    for r in records:
        out.setdefault(str(r.node or "?"), Counter())[str(r.verdict or "invalid")] += 1
    return dict(sorted(out.items()))
