"""``--isolation auto`` in the report: how often a reused server (the reuse pass: restore, or
reset where the engine cannot restore) and a fresh server agreed on the same prompt (same
configuration, residue, phase and document), and every cell that only a fresh server
caught (the reason auto exists: issue 17)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..text.ghmarkdown import code, escape_text
from ..records.manifest import RunManifest
from ..records.recordkeys import cell_key, point_key
from ..records.phase_record import PhaseRecord
from ..names.verdict import CLEAN, UNTESTED
from ..names.isolation import REUSE_ISOLATIONS
from ..names.isolation import IsolationName

__all__ = ["Agreement", "agreement_line", "agreement_of", "config_auto_line", "fresh_reasons",
           "stability"]


@dataclass
class Agreement:
    reuse: str = "reset"        # the reuse pass the cells were measured on
    both: int = 0               # cells measured on a reused and a fresh server
    both_ok: int = 0
    both_bad: int = 0
    only_fresh: list[PhaseRecord] = field(default_factory=list)   # fresh not ok, reset ok
    only_reset: list[PhaseRecord] = field(default_factory=list)   # reset not ok, fresh ok
    unjudged: int = 0           # cells on both passes that could not be compared (untested
                                # on one: unjudged, boot-fail, invalid, infra)

    @property
    def agree(self) -> int:
        return self.both_ok + self.both_bad


def agreement_of(records: Iterable[PhaseRecord]) -> Agreement | None:
    """The agreement of an auto run's records; None when no record came from one."""
    pairs: dict[tuple, dict[str, PhaseRecord]] = {}
    for r in records:
        if r.isolation_run != IsolationName.AUTO:
            continue
        key = cell_key(r)[:5]   # the cell without its pass: the two passes pair up
        pairs.setdefault(key, {})[r.isolation] = r
    if not pairs:
        return None
    a = Agreement(reuse=_reuse_pass(pairs.values()))
    for key in sorted(pairs, key=str):
        fresh = pairs[key].get("fresh")
        reset = next((pairs[key][p] for p in REUSE_ISOLATIONS if p in pairs[key]), None)
        if reset is None or fresh is None:
            continue
        if {reset.verdict, fresh.verdict} & UNTESTED:
            # nothing to compare: an unjudged answer is neither ok nor bad, and a server
            # that did not boot (or a point that did not exercise its cell) caught nothing
            a.unjudged += 1
            continue
        a.both += 1
        r_ok, f_ok = reset.verdict in CLEAN, fresh.verdict in CLEAN
        if r_ok and f_ok:
            a.both_ok += 1
        elif not r_ok and not f_ok:
            a.both_bad += 1
        elif r_ok:
            a.only_fresh.append(fresh)
        else:
            a.only_reset.append(reset)
    return a


def _reuse_pass(passes: Iterable[dict[str, PhaseRecord]]) -> str:
    """``restore``, ``reset``, or both joined, as the records' reuse passes were."""
    seen = {p for by_pass in passes for p in by_pass if p in REUSE_ISOLATIONS}
    return " and ".join(p for p in REUSE_ISOLATIONS if p in seen) or "reset"


def _cells(recs: list[PhaseRecord], labels: bool) -> str:
    out = []
    for r in recs:
        where = f"residue {r.residue} {escape_text(str(r.phase))}"
        if r.document_seed is not None:
            where += f" (document {r.document_seed}, {escape_text(str(r.verdict))})"
        if labels:
            where = f"{code(r.config_label or '?')} {where}"
        out.append(where)
    return "; ".join(out) if out else "none"


def agreement_line(records: list[PhaseRecord], *, labels: bool = True) -> str:
    """One line: agreement counts, then every cell only a fresh server caught (and any
    only a reset server caught); "" for records of no auto run."""
    a = agreement_of(records)
    if a is None:
        return ""
    unjudged = (f" ({a.unjudged} more on both passes not compared: unjudged, boot-fail, "
                f"invalid or infra on one or both)" if a.unjudged else "")
    name = a.reuse[0].upper() + a.reuse[1:]
    return (f"{name} vs fresh (`--isolation auto`): {a.both} cell{'s' if a.both != 1 else ''} "
            f"measured on both{unjudged}, {a.agree} agree ({a.both_ok} both ok, {a.both_bad} "
            f"both not ok), {len(a.only_fresh) + len(a.only_reset)} disagree; only a fresh server "
            f"caught: {_cells(a.only_fresh, labels)}; only a {a.reuse} server caught: "
            f"{_cells(a.only_reset, labels)}." + _stability(records, labels))


def _stability(records: list[PhaseRecord], labels: bool) -> str:
    """`` Fresh servers per non-ok cell: residue 4 self-hit (document 0): reproduced on 2
    servers; ...`` from the records' ``confirmed_on``; "" where no record has it (runs
    before issue 32 render as they did)."""
    cells = []
    for r in records:
        said = stability(r.confirmed_on) if r.isolation == IsolationName.FRESH else None
        if said:
            where = f"residue {r.residue} {escape_text(str(r.phase))}"
            if r.document_seed is not None:
                where += f" (document {r.document_seed})"
            if labels:
                where = f"{code(r.config_label or '?')} {where}"
            cells.append(f"{where}: {escape_text(said)}")
    return (" Fresh servers per non-ok cell: " + "; ".join(cells) + ".") if cells else ""


def fresh_reasons(records: Iterable[PhaseRecord]) -> str:
    """Why the fresh points ran: ``6 rule neighbourhood, 4 sample, 1 not ok on reset``."""
    seen: dict[tuple, str] = {}
    for r in records:
        if r.isolation_run == IsolationName.AUTO and r.isolation == IsolationName.FRESH:
            seen[(r.config_id, r.residue, r.document_seed)] = r.confirms or "?"
    c = Counter(seen.values())
    return ", ".join(f"{n} {escape_text(why)}" for why, n in c.most_common())


def config_auto_line(records: list[PhaseRecord], interrupted: list[RunManifest]) -> str:
    """A configuration's ``Isolation auto`` line: why its fresh points ran and how they
    agreed with the reset ones, or that no fresh server ran and why (``interrupted``: the
    manifests of its runs that did not finish); "" outside an auto run."""
    agree = agreement_line(records, labels=False)
    if not agree:
        return ""
    reasons = fresh_reasons(records)
    ids = ", ".join(code(m.run_id or "?") for m in interrupted)
    stopped = (f"run {ids} was" if len(interrupted) == 1 else f"runs {ids} were") if ids else ""
    missing = _fresh_not_run(records, interrupted)
    if not reasons:
        why = (f"before {stopped} interrupted; " + (missing or "any fresh points planned "
               "for it did not run (the plan per configuration is not recorded)")
               if stopped else "and the run finished, so none was planned")
        reuse = _reuse_pass([{r.isolation: r} for r in records])
        return (f"no fresh server ran for this configuration {why}; every cell shows its "
                f"{reuse} verdict only.")
    line = f"fresh servers for {reasons} (points); {agree}"
    if stopped:
        line += (f" {stopped[0].upper()}{stopped[1:]} interrupted: " + (
            missing or "fresh points planned for this configuration may not all have run "
            "(the plan per configuration is not recorded)") + ".")
    return line


def _fresh_not_run(records: list[PhaseRecord], interrupted: list[RunManifest]) -> str:
    """``12 of 14 planned fresh points did not run`` from the interrupted runs' plans, ""
    when a plan is missing."""
    from .interrupted import planned_points

    cids = {r.config_id for r in records}
    if len(cids) != 1 or not interrupted:
        return ""
    cid = next(iter(cids))
    planned = [planned_points(m, cid, "fresh") for m in interrupted]
    if any(n is None for n in planned):
        return ""
    ran = len({point_key(r) for r in records if r.isolation == IsolationName.FRESH
               and r.run_id in {m.run_id for m in interrupted}})
    total = sum(planned)
    return f"{max(total - ran, 0)} of {total} planned fresh points did not run"


def stability(confirmed_on: Sequence[dict] | None) -> str | None:
    """``reproduced on 2 servers`` / ``unstable: ok on 1 of 3`` / ``unstable: 3 servers,
    not ok on each, 2 different answers``; None for a cell measured on one server."""
    if not confirmed_on or len(confirmed_on) < 2:
        return None
    n = len(confirmed_on)
    if len({(s.get("verdict"), s.get("sha1")) for s in confirmed_on}) == 1:
        return f"reproduced on {n} servers"
    ok = sum(1 for s in confirmed_on if s.get("verdict") in CLEAN)
    if ok:
        return f"unstable: ok on {ok} of {n}"
    kinds = len({(s.get("verdict"), s.get("sha1")) for s in confirmed_on})
    return f"unstable: {n} servers, not ok on each, {kinds} different answers"
