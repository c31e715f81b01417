"""What identifies a record: its cell (configuration, case, residue, phase, document,
auto pass) and its data point (resume). ``case_id`` is None outside --prompts, the
document 0 (or the ``--seed`` of the rerun command) for a record written before
documents were an axis, the auto pass None outside --isolation auto: an old record keys as
it always did, with those defaults. One place for the store, the report, compare and
resume (``run.records`` re-exports these); stdlib only, so ``store`` can use it."""
from __future__ import annotations

import re
from typing import Any, Mapping

__all__ = ["document_of", "auto_pass", "cell_key", "point_key"]

_SEED_ARG = re.compile(r"--seed (\d+)\b")


def document_of(r: Mapping[str, Any]) -> int:
    """The document seed of a record; for one written before the field, the ``--seed``
    of its rerun command (its run's one seed), else 0."""
    if r.get("document_seed") is not None:
        return int(r["document_seed"])
    m = _SEED_ARG.search(str(r.get("rerun") or ""))
    return int(m[1]) if m else 0


def auto_pass(r: Mapping[str, Any]) -> str | None:
    """``reset`` / ``fresh`` for a record of an ``--isolation auto`` run, else None."""
    return r.get("isolation") if r.get("isolation_run") == "auto" else None


def cell_key(r: Mapping[str, Any]) -> tuple:
    """What one measured cell is: (configuration, case, residue, phase, document, auto
    pass)."""
    return (r.get("config_id") or r.get("config_label"), r.get("case_id"), r.get("residue"),
            r.get("phase"), document_of(r), auto_pass(r))


def point_key(r: Mapping[str, Any]) -> tuple:
    """The ``plan.Point.key`` a record belongs to (resume): (config_id, case, residue,
    document, auto pass or "")."""
    return (r.get("config_id"), r.get("case_id"), r.get("residue"), document_of(r),
            auto_pass(r) or "")
