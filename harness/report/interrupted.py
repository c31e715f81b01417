"""Runs that did not finish, said where a reader looks first: one line under the title, and
in each configuration's ``--isolation auto`` line when no fresh server ran for it.

Why: an interrupted auto run stops in its fresh pass (it runs last), so many cells carry
only the reset verdict, which is the weaker one (issue 17). Before this the only trace was
the provenance table at the bottom.

What a manifest records: whether the run finished (``interrupted``, or ``started_at``
without ``ended_at``), how many points finished (``timing.points``) and, in runs since
the driver writes it, the plan (``plan``: points in all and per configuration and pass,
kept up to date as confirmations are added). Older manifests (the H200 archive's among
them) have no plan: the report then says so rather than deriving a plan of its own."""
from __future__ import annotations

from collections.abc import Iterable

from ..text.ghmarkdown import bold, code
from ..records.manifest import RunManifest
from ..records.run_timing import RunPlan, RunTiming
from ..records.recordkeys import point_key
from ..records.phase_record import PhaseRecord
from ..names.isolation import IsolationName

__all__ = ["finished_points", "interrupted_line", "interrupted_manifests", "is_interrupted",
           "planned_points"]


def is_interrupted(m: RunManifest) -> bool:
    return m.did_not_finish


def interrupted_manifests(manifests: Iterable[RunManifest], run_ids: Iterable[str] | None = None
                          ) -> list[RunManifest]:
    """The manifests of runs that did not finish (of ``run_ids`` only, when given)."""
    want = None if run_ids is None else set(run_ids)
    return [m for m in manifests if is_interrupted(m)
            and (want is None or m.run_id in want)]


def finished_points(m: RunManifest, records: Iterable[PhaseRecord]) -> int:
    """Points of run ``m`` that finished: the manifest's count (``timing.points``, written
    as the run stops), else the distinct points of its records on disk."""
    n = (m.timing or RunTiming()).points
    if isinstance(n, int):
        return n
    return len({point_key(r) for r in records if r.run_id == m.run_id})


def planned_points(m: RunManifest, config_id: str | None = None, isolation: str | None = None
                   ) -> int | None:
    """Points run ``m`` planned (of one configuration and pass, when given); None when its
    manifest has no plan (runs before the plan was recorded)."""
    if not isinstance(m.plan, RunPlan):
        return None
    return m.plan.planned(config_id, isolation)


def _runs_phrase(ms: list[RunManifest], records: list[PhaseRecord]) -> str:
    """``run `A` (541 of 556 points finished)`` / ``runs `A` (…), `B` (…)``."""
    parts = []
    for m in ms:
        n, of = finished_points(m, records), planned_points(m)
        what = f"{n} of {of} planned points" if of else f"{n} point{'s' if n != 1 else ''}"
        parts.append(f"{code(m.run_id or '?')} ({what} finished)")
    return ("run " if len(parts) == 1 else "runs ") + ", ".join(parts)


def interrupted_line(manifests: list[RunManifest], records: list[PhaseRecord]) -> str:
    """The opening summary's line for runs that did not finish; "" when every run did."""
    ms = interrupted_manifests(manifests)
    if not ms:
        return ""
    auto = any(r.isolation_run == IsolationName.AUTO for r in records)
    # an auto run counts a point per residue, document and pass: more than the headline's
    # data points, which fold documents and passes into one cell
    what = "a point is one residue, document and pass; " if auto else ""
    reuse = ("restore" if any(r.isolation == IsolationName.RESTORE for r in records)
             else "reset")
    tail = (f"a cell without a fresh confirmation shows its {reuse} verdict only."
            if auto else "points not on disk were not measured.")
    unknown = ("" if all(planned_points(m) for m in ms)
               else "how many points were planned is not recorded; ")
    inner = f" ({what}{unknown}".rstrip("; ") + ")" if (what or unknown) else ""
    return (f"{bold('Interrupted:')} {_runs_phrase(ms, records)} did not finish{inner}; {tail}")
