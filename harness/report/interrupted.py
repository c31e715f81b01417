"""Runs that did not finish, said where a reader looks first: one line under the title, and
in each configuration's ``--isolation auto`` line when no fresh server ran for it.

Why: an interrupted auto run stops in its fresh pass (it runs last), so many cells carry
only the reset verdict, which is the weaker one (issue 17). Before this the only trace was
the provenance table at the bottom.

What a manifest records: whether the run finished (``interrupted``, or ``started_at``
without ``ended_at``) and how many points finished (``timing.points``). It does not
record how many points were planned (the progress line on stderr had it), nor the plan per
configuration, so the report says that rather than deriving a plan of its own."""
from __future__ import annotations

from collections.abc import Iterable

from ..ghmarkdown import bold, code
from ..recordkeys import point_key

__all__ = ["finished_points", "interrupted_line", "interrupted_manifests", "is_interrupted"]


def is_interrupted(m: dict) -> bool:
    return bool(m.get("interrupted") or (m.get("started_at") and not m.get("ended_at")))


def interrupted_manifests(manifests: Iterable[dict], run_ids: Iterable[str] | None = None
                          ) -> list[dict]:
    """The manifests of runs that did not finish (of ``run_ids`` only, when given)."""
    want = None if run_ids is None else set(run_ids)
    return [m for m in manifests if is_interrupted(m)
            and (want is None or m.get("run_id") in want)]


def finished_points(m: dict, records: Iterable[dict]) -> int:
    """Points of run ``m`` that finished: the manifest's count (``timing.points``, written
    as the run stops), else the distinct points of its records on disk."""
    n = (m.get("timing") or {}).get("points")
    if isinstance(n, int):
        return n
    return len({point_key(r) for r in records if r.get("run_id") == m.get("run_id")})


def _runs_phrase(ms: list[dict], records: list[dict]) -> str:
    """``run `A` (541 points finished)`` / ``runs `A` (…), `B` (…)``."""
    parts = []
    for m in ms:
        n = finished_points(m, records)
        parts.append(f"{code(m.get('run_id') or '?')} ({n} point{'s' if n != 1 else ''} "
                     "finished)")
    return ("run " if len(parts) == 1 else "runs ") + ", ".join(parts)


def interrupted_line(manifests: list[dict], records: list[dict]) -> str:
    """The opening summary's line for runs that did not finish; "" when every run did."""
    ms = interrupted_manifests(manifests)
    if not ms:
        return ""
    auto = any(r.get("isolation_run") == "auto" for r in records)
    # an auto run counts a point per residue, document and pass: more than the headline's
    # data points, which fold documents and passes into one cell
    what = "a point is one residue, document and pass; " if auto else ""
    tail = ("a cell without a fresh confirmation shows its reset verdict only."
            if auto else "points not on disk were not measured.")
    return (f"{bold('Interrupted:')} {_runs_phrase(ms, records)} did not finish ({what}how "
            f"many points were planned is not recorded); {tail}")
