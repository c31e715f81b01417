"""What identifies a record: its cell (configuration, case, residue, phase, document,
auto pass) and its data point (resume). ``case_id`` is None outside --prompts, the
document 0 (or the ``--seed`` of the rerun command) for a record written before
documents were an axis, the auto pass None outside --isolation auto: an old record keys as
it always did, with those defaults. One place for the store, the report, compare and
resume (``run.records`` re-exports these); stdlib only, so ``store`` can use it. A record is
either as read (a dict) or typed (``run.records.PhaseRecord``): both key the same."""
from __future__ import annotations

import re
from collections.abc import Mapping   # not typing's alias: 3x slower per isinstance
from typing import Any
from ..serve.isolation import IsolationName

__all__ = ["value_of", "document_of", "auto_pass", "cell_key", "point_key"]

_SEED_ARG = re.compile(r"--seed (\d+)\b")


def value_of(r: Any, key: str) -> Any:
    """A record's ``key``: of a dict as read, or a typed record's attribute (None when
    absent from either)."""
    return r.get(key) if isinstance(r, Mapping) else getattr(r, key, None)


def document_of(r: Any) -> int:
    """The document seed of a record; for one written before the field, the ``--seed``
    of its rerun command (its run's one seed), else 0."""
    if value_of(r, "document_seed") is not None:
        return int(value_of(r, "document_seed"))
    m = _SEED_ARG.search(str(value_of(r, "rerun") or ""))
    return int(m[1]) if m else 0


def auto_pass(r: Any) -> str | None:
    """``reset`` / ``fresh`` for a record of an ``--isolation auto`` run, else None."""
    return value_of(r, "isolation") if value_of(r, "isolation_run") == IsolationName.AUTO else None


def cell_key(r: Any) -> tuple:
    """What one measured cell is: (configuration, case, residue, phase, document, auto
    pass)."""
    v = lambda k: value_of(r, k)  # noqa: E731
    return (v("config_id") or v("config_label"), v("case_id"), v("residue"), v("phase"),
            document_of(r), auto_pass(r))


def point_key(r: Any) -> tuple:
    """The ``plan.Point.key`` a record belongs to (resume): (config_id, case, residue,
    document, auto pass or "")."""
    return (value_of(r, "config_id"), value_of(r, "case_id"), value_of(r, "residue"),
            document_of(r), auto_pass(r) or "")
