"""What changed between two sweeps, per configuration (and prompt case) and residue.

Configurations are matched by ``config_id`` (the hash of the configuration's identity),
then by ``config_label`` for a configuration whose id is on one side only (a harness
version that hashes differently still lines up by its human label), then by the whole
configuration apart from the patch set (the before / after comparison of a fix). Within a
matched
configuration each residue is one of:

- ``fixed``: some phase was not ok before, every phase is ok now;
- ``regressed``: a phase that was ok before is not ok now (this is what a gate fails on);
- ``still_broken``: not ok before, not ok now (and no phase that was ok went bad);
- ``newly_covered``: not measured before (its new status is given beside it);
- ``no_longer_covered``: measured before, not now;
- ``unchanged_ok``: ok before and now.

The result is a ``comparison.Comparison`` (its ``as_dict()`` is ``sweep compare --json``):
``summary`` (count per status), ``regressions`` (one per regressed cell), ``regressed``
(their number: non-zero means a gate fails), ``ok``, and ``configs`` with every point's
old and new verdict, sha1 and rerun line per phase.
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from ..text.ghmarkdown import bold, code, escape_text, table
from ..text.ranges import residues_phrase
from ..names.isolation import REUSE_ISOLATIONS
from ..names.verdict import BUG_VERDICTS, CLEAN, worst
from ..names.phase import PHASES, phase_key
from ..records.phase_record import PhaseRecord, RecordsIn, record_identity, sha12, typed
from ..records.recordkeys import auto_pass, document_of, latest_records
from .comparison import (CellSummary, Comparison, ConfigChange, PhaseChange, PointChange,
                         Regression)
from ..records.same_compile import bytes_between, bytes_phrase

STATUSES = ("regressed", "fixed", "still_broken", "newly_covered", "no_longer_covered",
            "unchanged_ok")
STATUS_WORDS = {s: s.replace("_", " ") for s in STATUSES}
# Fields that may differ between matched configurations: the fix set is what a before /
# after comparison changes on purpose.
PATCH_FIELDS = frozenset({"patches"})


def _by_config(records: list[PhaseRecord]) -> dict[str, dict]:
    """Cells per configuration; a --prompts run's configuration is split per case (its
    key, label and identity name the case, so each case pairs with the same case)."""
    recs, _ = latest_records(records)
    out: dict[str, dict] = {}
    for r in recs:
        cid = r.config_id or r.config_label or "?"
        label = r.config_label or cid
        ident = record_identity(r)
        if r.case_id:
            cid, label = f"{cid}#{r.case_id}", f"{label} · case {r.case_id}"
            ident = {**ident, "case": r.case_id}
        c = out.setdefault(cid, {"config_id": cid, "config_label": label,
                                 "config": ident, "runs": [], "cells": {}})
        if r.run_id and r.run_id not in c["runs"]:
            c["runs"].append(r.run_id)
        key = (int(r.residue), document_of(r), r.phase or "?")
        # an auto run's fresh record of a cell is the standard; its reuse record yields
        if key not in c["cells"] or auto_pass(c["cells"][key]) in REUSE_ISOLATIONS:
            c["cells"][key] = r
    return out


def _sans(config: dict, drop: frozenset) -> str:
    return json.dumps({k: v for k, v in config.items() if k not in drop and k not in
                       ("notes", "overrides")}, sort_keys=True, default=str)


def _match(old: dict[str, dict], new: dict[str, dict]
           ) -> list[tuple[str | None, str | None, str]]:
    """Pairs (old id, new id, matched_by): same config_id, else same label, else the same
    configuration apart from the patch set (before/after a fix), else unmatched."""
    pairs: list[tuple[str | None, str | None, str]] = []
    old_left = dict(old)
    new_left = [cid for cid in new]
    for cid in list(new_left):
        if cid in old_left:
            pairs.append((cid, cid, "config_id"))
            old_left.pop(cid)
            new_left.remove(cid)
    keys = (("config_label", lambda c: c["config_label"]),
            ("configuration except patches",
             lambda c: _sans(c["config"], PATCH_FIELDS) if c["config"] else None))
    for how, key in keys:
        index: dict = {}
        for oid, c in old_left.items():
            k = key(c)
            if k is not None:
                index.setdefault(k, []).append(oid)
        for cid in list(new_left):
            k = key(new[cid])
            cands = index.get(k) if k is not None else None
            if cands:
                oid = cands.pop(0)
                old_left.pop(oid, None)
                new_left.remove(cid)
                pairs.append((oid, cid, how))
    pairs += [(None, cid, "new only") for cid in new_left]
    pairs += [(oid, None, "old only") for oid in old_left]
    return pairs


def _cell_summary(r: PhaseRecord) -> CellSummary:
    return CellSummary(verdict=r.verdict, sha1=(r.sha1 or "")[:12],
                       verbatim=f"{r.verbatim_n}/{r.verbatim_total}", reason=r.reason,
                       run_id=r.run_id, rerun=r.rerun)


def _point(residue: int, old_cells: dict[str, PhaseRecord], new_cells: dict[str, PhaseRecord],
           document: int | None) -> PointChange:
    phases = sorted(set(old_cells) | set(new_cells), key=phase_key)
    old_v = {p: old_cells[p].verdict for p in old_cells}
    new_v = {p: new_cells[p].verdict for p in new_cells}
    regressed_phases = [p for p in phases
                        if old_v.get(p) in CLEAN and p in new_v and new_v[p] not in CLEAN]
    old_status = worst(old_v.values()) if old_v else None
    new_status = worst(new_v.values()) if new_v else None
    if not old_cells:
        status = "newly_covered"
    elif not new_cells:
        status = "no_longer_covered"
    elif regressed_phases:
        status = "regressed"
    elif old_status not in CLEAN and new_status in CLEAN:
        status = "fixed"
    elif new_status not in CLEAN:
        status = "still_broken"
    else:
        status = "unchanged_ok"
    changes = {}
    for p in phases:   # a non-ok cell's bytes: only between runs of one compile (issue 48)
        old, new = old_cells.get(p), new_cells.get(p)
        changes[p] = PhaseChange(_cell_summary(old) if old else None,
                                 _cell_summary(new) if new else None,
                                 bytes_between(old, new) if old and new else None)
    words = {c.bytes["bytes"] for c in changes.values() if c.bytes}
    return PointChange(
        residue=residue, status=status, old_status=old_status, new_status=new_status,
        regressed_phases=tuple(regressed_phases), phases=changes,
        bytes=next((w for w in ("not_comparable", "changed", "same") if w in words), None),
        document=document)


def compare_records(old: RecordsIn, new: RecordsIn) -> Comparison:
    """Per configuration and residue, what changed from ``old`` to ``new`` (records as
    read or typed)."""
    old, new = typed(old), typed(new)
    o, n = _by_config(old), _by_config(new)
    configs = []
    totals = {s: 0 for s in STATUSES}
    regressions = []
    for oid, nid, how in _match(o, n):
        oc = o.get(oid) if oid else None
        nc = n.get(nid) if nid else None
        ocells, ncells = (oc or {}).get("cells", {}), (nc or {}).get("cells", {})
        # a point is one prompt: (residue, document); templated lengths are in the cells
        prompts = sorted({(res, doc) for res, doc, _ in ocells} |
                         {(res, doc) for res, doc, _ in ncells})
        several = len({doc for _, doc in prompts}) > 1
        points = []
        for res, doc in prompts:
            op = {p: r for (rr, dd, p), r in ocells.items() if (rr, dd) == (res, doc)}
            np_ = {p: r for (rr, dd, p), r in ncells.items() if (rr, dd) == (res, doc)}
            pt = _point(res, op, np_, doc if several else None)
            points.append(pt)
            totals[pt.status] += 1
            regressions += [Regression(
                config_id=(nc or oc)["config_id"], config_label=(nc or oc)["config_label"],
                residue=res, phase=ph, old_verdict=op[ph].verdict,
                new_verdict=np_[ph].verdict, sha1=(np_[ph].sha1 or "")[:12],
                reason=np_[ph].reason, rerun=np_[ph].rerun, run_id=np_[ph].run_id,
                document=doc if several else None) for ph in pt.regressed_phases]
        counts = {s: sum(1 for p in points if p.status == s) for s in STATUSES}
        configs.append(ConfigChange(
            config_id=nid or oid, old_config_id=oid, new_config_id=nid,
            config_label=(nc or oc)["config_label"],
            old_config_label=(oc or {}).get("config_label"), matched_by=how,
            old_runs=(oc or {}).get("runs", []), new_runs=(nc or {}).get("runs", []),
            counts=counts, points=tuple(points)))
    old_runs = sorted({r.run_id for r in old if r.run_id})
    new_runs = sorted({r.run_id for r in new if r.run_id})
    return Comparison(old_runs=old_runs, new_runs=new_runs, summary=totals,
                      regressions=tuple(regressions), configs=tuple(configs))


def _cell_word(c: CellSummary | None) -> str:
    if c is None:
        return "–"
    if c.verdict in CLEAN:
        return c.verbatim
    return bold(escape_text(c.verdict)) + f" {code(c.sha1 or '–')}"


def render_compare_markdown(result: Comparison, *, show_unchanged: bool = False) -> str:
    """Markdown of :func:`compare_records`: a totals line, then per configuration the
    residues that changed (``unchanged_ok`` folded into a count unless asked for)."""
    old = ", ".join(code(r) for r in result.old_runs) or "–"
    new = ", ".join(code(r) for r in result.new_runs) or "–"
    s = result.summary
    out = [f"# Sweep comparison: {old} → {new}", ""]
    parts = [f"{s[k]} {STATUS_WORDS[k]}" for k in STATUSES if s.get(k)]
    verdict = bold(f"{len(result.regressions)} regression"
                   f"{'s' if len(result.regressions) != 1 else ''}") \
        if result.regressions else "no regressions"
    out += [f"{verdict}; " + (", ".join(parts) if parts else "nothing to compare") + ".", ""]
    for c in result.configs:
        out += _config_section(c, result.regressions, show_unchanged)
    return "\n".join(out)


def _config_section(c: ConfigChange, regressions: tuple[Regression, ...],
                    show_unchanged: bool) -> list[str]:
    """One configuration's heading, how it was matched, a bullet per status, the table of
    the points that changed and the rerun lines of its regressions."""
    out = [f"## {code(c.config_label)}", ""]
    if c.matched_by in ("new only", "old only"):
        out += [f"Only in the {'new' if c.matched_by == 'new only' else 'old'} run.", ""]
    elif c.matched_by == "config_label":
        out += ["Matched by label (the configuration ids differ).", ""]
    elif c.matched_by == "configuration except patches":
        old_p = c.old_config_label or "?"
        out += [f"Matched with {code(old_p)}: the same configuration apart from the "
                "patch set.", ""]
    out += _status_bullets(c) + [""]
    rows, phases = _changed_rows(c, show_unchanged)
    if rows:
        header = ["residue", "change"] + [f"{escape_text(ph)} (old → new)" for ph in phases]
        out += [table(header, rows), ""]
    out += _bytes_lines(c)
    seen = []
    for reg in regressions:
        if reg.config_id == c.config_id and reg.rerun and reg.rerun not in seen:
            seen.append(reg.rerun)
    if seen:
        from ..text.ghmarkdown import fence
        out += ["Rerun the regressions:", "", fence("\n".join(seen), "sh"), ""]
    return out


def _bytes_lines(c: ConfigChange) -> list[str]:
    """What the still-broken cells' bytes say: the same answer, another one under the same
    compile, or not comparable and why (harness/records/same_compile.py)."""
    lines = []
    for p in c.points:
        for ph, cell in p.phases.items():
            if cell.bytes:
                where = f"residue {p.residue}" + (f", document {p.document}"
                                                  if p.document is not None else "")
                lines.append(f"- {where} {escape_text(ph)}: "
                             f"{escape_text(bytes_phrase(cell.bytes))}")
    return (["Bytes of the cells not ok in both runs:", "", *lines, ""]) if lines else []


def _status_bullets(c: ConfigChange) -> list[str]:
    by: dict[str, list[int]] = defaultdict(list)
    for p in c.points:
        by[p.status].append(p.residue)
    bullets = []
    for st in STATUSES:
        if by.get(st):
            word = STATUS_WORDS[st]
            txt = (f"- {bold(word) if st == 'regressed' else word}: "
                   f"{residues_phrase(sorted(set(by[st])))}")
            if st == "newly_covered":
                bad = [p.residue for p in c.points
                       if p.status == st and p.new_status not in CLEAN]
                txt += (f" (not ok now: {residues_phrase(sorted(set(bad)))})" if bad
                        else " (all ok)")
            bullets.append(txt)
    return bullets


def _changed_rows(c: ConfigChange, show_unchanged: bool) -> tuple[list[list[str]], list[str]]:
    """A row per point that changed (every point with ``show_unchanged``), a column per phase."""
    rows = []
    phases = sorted({ph for p in c.points for ph in p.phases}, key=phase_key)
    for p in c.points:
        quiet = p.status in ("unchanged_ok", "no_longer_covered") or (
            p.status == "newly_covered" and p.new_status in CLEAN)
        if quiet and not show_unchanged:
            continue
        row = [f"residue {p.residue}" + (f", document {p.document}"
                                         if p.document is not None else ""),
               bold(STATUS_WORDS[p.status]) if p.status == "regressed"
               else STATUS_WORDS[p.status]]
        for ph in phases:
            cell = p.phases.get(ph) or PhaseChange(None, None)
            row.append(f"{_cell_word(cell.old)} → {_cell_word(cell.new)}")
        rows.append(row)
    return rows, phases


# -- several runs: built on harness.results.frame (pandas, loaded when asked) ---------------
# A cell across runs is keyed by its label (a harness that hashes configurations differently
# still lines up), case, document, residue and phase.
TREND_KEY = ["config_label", "case_id", "document", "residue", "phase"]
HISTORY_COLUMNS = ["run_id", "started_at", "harness_version", "engine_version", "patches",
                   "isolation", "verdict", "verbatim", "sha1", "cached_tokens", "reason"]


def run_order(df) -> list[str]:
    """The runs of a frame, oldest first (by their first record's ``started_at``)."""
    first = df.groupby("run_id", sort=False)["started_at"].min()
    return list(first.sort_values(kind="stable").index)


def _word(verdict: str, sha1: Any) -> str:
    return "ok" if verdict in CLEAN else f"{verdict} {str(sha1 or '–')[:12]}".strip()


def trend_frame(df, *, changed_only: bool = True):
    """One row per cell (``TREND_KEY``), one column per run (oldest first): the verdict,
    with the answer's sha1 where it is not ok. ``changed_only`` keeps the cells whose
    verdicts differ between the runs that measured them, or are not ok in any."""
    import pandas as pd
    if df.empty:
        return pd.DataFrame(columns=TREND_KEY)
    d = df.assign(word=[_word(v, s) for v, s in zip(df["verdict"].astype(str), df["sha1"])],
                  case_id=df["case_id"].fillna(""), phase=df["phase"].astype(str))
    # an auto run's fresh record of a cell speaks for it, as in a two-run compare
    d = d.assign(_reuse=d["isolation_run"].eq("auto") & ~d["isolation"].astype(str).eq("fresh"))
    d = d.sort_values("_reuse", kind="stable").drop_duplicates(TREND_KEY + ["run_id"])
    wide = d.pivot(index=TREND_KEY, columns="run_id", values="word")
    wide = wide[[r for r in run_order(df) if r in wide.columns]]
    if changed_only:
        verdicts = d.assign(verdict=d["verdict"].astype(str)).pivot(
            index=TREND_KEY, columns="run_id", values="verdict")
        measured = [set(row.dropna()) for _, row in verdicts.iterrows()]
        keep = [len(vs) > 1 or vs - {"ok"} != set() for vs in measured]
        wide = wide[keep]
    wide = wide.reset_index()
    wide["phase"] = pd.Categorical(wide["phase"], categories=list(PHASES), ordered=True)
    return wide.sort_values(TREND_KEY, kind="stable").reset_index(drop=True)


def cell_history(df, *, residue: int | None = None, phase: str | None = None,
                 config: str | None = None, document: int | None = None):
    """The records of the cells a filter names, one row per (cell, run), oldest run first:
    one cell across builds (``HISTORY_COLUMNS`` beside the cell's key). ``config`` is a
    substring of the configuration label or a configuration id."""
    sel = df
    if residue is not None:
        sel = sel[sel["residue"] == residue]
    if phase is not None:
        sel = sel[sel["phase"].astype(str) == phase]
    if document is not None:
        sel = sel[sel["document"] == document]
    if config:
        sel = sel[sel["config_label"].str.contains(config, regex=False)
                  | (sel["config_id"] == config)]
    order = {r: i for i, r in enumerate(run_order(df))}
    sel = sel.assign(verbatim=[f"{n}/{t}" if n is not None and t is not None else "–"
                               for n, t in zip(sel["verbatim_n"], sel["verbatim_total"])],
                     _run=sel["run_id"].map(order), sha1=sel["sha1"].str.slice(0, 12))
    sel = sel.sort_values(["config_label", "document", "residue", "phase", "_run"],
                          kind="stable")
    return sel[TREND_KEY[:1] + TREND_KEY[2:] + HISTORY_COLUMNS].reset_index(drop=True)


def _runs_legend(df) -> list[str]:
    def joined(col):
        return df.groupby("run_id")[col].agg(lambda v: ", ".join(sorted({str(x) for x in v
                                                                         if x is not None})))
    started = df.groupby("run_id")["started_at"].min()
    harness, engine, patches = joined("harness_version"), joined("engine_version"), \
        joined("patches")
    # a non-ok cell's sha1 is comparable between runs only under one compile (issue 48)
    compiled, gpu = joined("compile"), joined("gpu")
    rows = [[code(r), started[r] or "–", code(harness[r] or "–"), engine[r] or "–",
             patches[r] or "–", escape_text(gpu[r] or "–"), code(compiled[r] or "–")]
            for r in run_order(df)]
    return [table(["run", "started", "harness", "engine", "patches", "GPU", "compile"], rows),
            "A non-ok cell's sha1 is comparable between runs only where the compile column "
            "agrees (docs/isolation.md, \"What a broken cell's bytes depend on\").", ""]


def _cells(values) -> list[str]:
    import pandas as pd
    return ["–" if pd.isna(v) else escape_text(str(v)) for v in values]


def render_trend_markdown(df, *, changed_only: bool = True) -> str:
    """Markdown of :func:`trend_frame`: the runs (oldest first) and the cells that changed
    across them, or every cell."""
    runs = run_order(df)
    wide = trend_frame(df, changed_only=changed_only)
    out = [f"# Sweep trend: {len(runs)} runs", "", *_runs_legend(df)]
    if wide.empty:
        return "\n".join(out + ["Every cell the runs share has the same verdict, and it is "
                                 "ok." if changed_only else "No cells.", ""])
    what = "cells whose verdict changed or is not ok" if changed_only else "every cell"
    out += [f"{len(wide)} {what} (a run's column: its verdict, and the answer's sha1 where "
            "it is not ok; – not measured):", ""]
    header = ["configuration", "document", "residue", "phase"] + [code(r) for r in runs]
    rows = [[code(label) + (f" · case {case}" if case else ""), str(doc), str(res), str(ph)]
            + _cells(words)
            for label, case, doc, res, ph, *words in wide.itertuples(index=False, name=None)]
    return "\n".join(out + [table(header, rows), ""])


def render_history_markdown(hist) -> str:
    """Markdown of :func:`cell_history`: per cell, a row per run."""
    if hist.empty:
        return "# Cell history\n\nNo record matches the cell asked for.\n"
    out = ["# Cell history", ""]
    for (label, doc, res, ph), g in hist.groupby(["config_label", "document", "residue",
                                                  "phase"], sort=False, observed=True):
        out += [f"## {code(label)}: residue {res}, {escape_text(str(ph))}"
                + (f", document {doc}" if hist["document"].nunique() > 1 else ""), ""]
        rows = [_cells(r) for r in g[HISTORY_COLUMNS].itertuples(index=False, name=None)]
        out += [table(HISTORY_COLUMNS, rows), ""]
    return "\n".join(out)


__all__ = ["compare_records", "render_compare_markdown", "STATUSES", "BUG_VERDICTS", "sha12",
           "run_order", "trend_frame", "cell_history", "render_trend_markdown",
           "render_history_markdown"]
