"""The whole markdown report: sections in order, written atomically."""
from __future__ import annotations

import pathlib
from typing import Any, Iterable

from ..text.ghmarkdown import bold, code, escape_text
from ..text.phrase import plural
from ..records.manifest import RunManifest, as_manifest, typed_manifests
from ..records.phase_record import PhaseRecord, RecordsIn, typed
from ..records.recordkeys import latest_records, reference_cells
from ..names.verdict import CLEAN
from ..names.phase import PhaseName, phase_key
from .auto import agreement_line
from .baseline import render_baseline
from .cases import case_groups, case_note, case_suffix
from .cells import Footnotes
from .columns import legend as columns_legend
from .engine_notice import engine_notice, live_notice
from .divergence import reference_lines, reference_texts
from .interrupted import interrupted_line, interrupted_manifests
from .model import group_configs, varying_fields
from .provenance import render_provenance
from .sections import (render_config_summary, render_ladder, render_results_table,
                       render_thread_view, short_labels, summary_counts)

__all__ = ["render_markdown", "write_report", "load_inputs", "title_markdown",
           "headline_markdown"]


def render_markdown(records: RecordsIn,
                    manifests: list[dict] | list[RunManifest] | None = None, *,
                    full: bool = False, title: str | None = None,
                    explained: list[tuple[dict | RunManifest, RecordsIn]] | None = None
                    ) -> str:
    """The whole report as GitHub-flavoured markdown.

    ``records``: phase records of one or more runs (docs/records.md), as read or typed.
    ``manifests``: their run manifests, as read or typed (optional: they add the command
    line, the dates, planned-but-missing residues and the interrupted flag). ``full``: one row per residue, no folding, and every
    rerun command line. ``explained``: (manifest, records) of the explain runs linked to
    these runs (``sweep explain``): their ladders make the "Explained" section. The one
    place the report types what it is given (``typed``): every section behind it reads
    ``PhaseRecord``s."""
    manifests = typed_manifests(manifests)
    explained = [(as_manifest(m), typed(rs)) for m, rs in explained or []]
    if not records:
        return (f"# {title or 'Residue sweep report'}\n\nNo records: nothing was measured.\n")
    records = typed(records)
    recs, superseded = latest_records(records)
    configs = group_configs(recs)       # each configuration over every case (title, provenance)
    groups = case_groups(recs)          # --prompts: per case; otherwise the one group None
    by_case = groups[0][0] is not None or len(groups) > 1
    short, corner = short_labels(configs)
    planned = sorted({int(x) for m in manifests for x in (m.residues or [])})

    title_md = escape_text(title) if title is not None else title_markdown(recs)
    out = [f"# {title_md}", ""]
    # an explain run's clean reruns give clean logprobs at the parent's prompts
    texts = reference_texts(records, [r for _, rs in explained for r in rs])
    out += _summary_lines(recs, configs, groups, manifests, texts)
    summary = {"interrupted": interrupted_manifests(manifests)}
    if by_case:
        out += _by_case_body(groups, manifests, planned, full, texts, summary)
    else:
        out += _body(configs, planned, full, short, corner, texts, summary)
    for section in _sections(recs, configs, manifests, explained):
        out += [section, ""]
    out.append(render_provenance(configs, recs, manifests, superseded))
    out.append("")
    return "\n".join(out)


def _summary_lines(recs: list[PhaseRecord], configs, groups, manifests: list[RunManifest],
                   texts) -> list[str]:
    """Notices, the headline, a line per configuration, the references, the agreement of
    the runs and the baseline the gate compared with."""
    out: list[str] = []
    for notice in (live_notice(recs), engine_notice(recs)):
        if notice:
            out += [notice, ""]
    out += [headline_markdown(recs) + ".", ""]
    stopped_line = interrupted_line(manifests, recs)
    if stopped_line:
        out += [stopped_line, ""]
    for case, cds in groups:
        for cd in cds:
            out.append(f"- {code(cd.label)}{case_suffix(case)}: {summary_counts(cd)}.")
    out += reference_lines(recs, texts)
    out.append("")
    agree = agreement_line(recs, labels=len(configs) > 1)
    if agree:
        out += [agree, ""]
    gated = render_baseline(manifests)   # "" unless the run had --baseline
    if gated:
        out += [gated, ""]
    return out


def _sections(recs: list[PhaseRecord], configs, manifests: list[RunManifest],
              explained: list[tuple[RunManifest, list[PhaseRecord]]]) -> list[str]:
    """The sections only some runs have, in the report's order: nodes (several Ray nodes),
    load (``--load``), explained (``sweep explain``), timing (a boot split or auto passes)."""
    from .explained import render_explained
    from .load import render_load
    from .nodes import render_nodes
    from .timing import render_timing
    found = (render_nodes(recs), render_load(configs), render_explained(explained),
             render_timing(manifests, recs))
    return [s for s in found if s]


def title_markdown(recs: list[PhaseRecord]) -> str:
    """The report's title (markdown, no ``#``) for the latest records ``recs``."""
    configs, groups = group_configs(recs), case_groups(recs)
    short, corner = short_labels(configs)
    if len(configs) == 1:
        title = "Residue sweep: " + code(configs[0].label)
    elif len(configs) <= 4 and corner != "configuration":
        title = f"Residue sweep: {corner}, " + " vs ".join(short[c.config_id] for c in configs)
    else:
        title = f"Residue sweep: {len(configs)} configurations"
    if groups[0][0] is not None or len(groups) > 1:
        title += f", {len(groups)} prompt case{'s' if len(groups) != 1 else ''}"
    return title


def headline_markdown(recs: list[PhaseRecord]) -> str:
    """``N configurations, P data points, C phase cells: all ok`` (or what is not). A cell
    is one of the table's (a point's phase); where several records speak for one (documents,
    auto's reused and fresh servers) the records are counted beside it (issue 50: auto's
    "1 point not ok (4 cells)" counted records)."""
    configs, groups = group_configs(recs), case_groups(recs)
    refs = reference_cells(recs)   # --reference cold / first: the measure, not judged
    table = [c for _, cs in groups for cd in cs for c in cd.table_cells()]
    bad_cells = sum(1 for c in table if c.verdict not in CLEAN and not c.reference)
    points = sum(len(c.residues) for _, cs in groups for c in cs)
    bad_points = sum(1 for _, cs in groups for c in cs for s in c.statuses().values()
                     if s not in CLEAN)
    measured = f" ({len(recs)} records)" if len(recs) != len(table) else ""
    headline = (f"{plural(len(configs), 'configuration')}, {plural(points, 'data point')}, "
                f"{plural(len(table), 'phase cell')}{measured}: ")
    ref_said = (f", {len(refs)} of them the reference the others were judged against (not "
                "judged)" if refs else "")
    return headline[:-2] + ref_said + ": " + (
        bold(f"{plural(bad_points, 'point')} not ok ({plural(bad_cells, 'cell')})")
        if bad_points else "every judged cell ok" if refs else "all ok")


def _body(configs, planned, full, short, corner, texts, summary) -> list[str]:
    """Results, footnotes, ladder and summaries of one set of configurations."""
    out: list[str] = []
    notes = Footnotes(texts)
    out += ["## Results", ""]
    if len(configs) > 1:
        out += [f"Columns: {escape_text(', '.join(varying_fields([c.identity for c in configs])) or 'configuration')}"
                f" × phase; a clean cell is verbatim `n/N`, a bad one is bold.{columns_legend()}", ""]
    else:
        out += ["A clean cell is verbatim `n/N` (chars of the answer found verbatim in the "
                f"source / answer length); a bad cell is bold.{columns_legend()}", ""]
    out.append(render_results_table(configs, notes, full=full))
    out.append("")
    residues_all = sorted({r for c in configs for r in c.residues})
    if len(configs) > 1 and len(residues_all) <= 8:
        hit_phases = [p for p in sorted({p for c in configs for p in c.phases}, key=phase_key)
                      if p != PhaseName.COLD]
        for p in hit_phases[-1:]:
            out += [f"The measured {escape_text(p)} request, thread style:", "",
                    render_thread_view(configs, p, short, corner), ""]
    fn = notes.render(len(configs) > 1, short)
    if fn:
        out += [fn, ""]

    ladder = render_ladder(configs, short, corner)
    if ladder:
        out += [ladder, ""]

    out += ["## Summary per configuration", ""]
    for cd in configs:
        out += [render_config_summary(cd, planned or None, full, **summary), ""]
    return out


def _by_case_body(groups, manifests, planned, full, texts, summary) -> list[str]:
    """A --prompts run: a results table per case (its own footnotes and ladder), then a
    summary per configuration and case."""
    out = ["## Results by case", "",
           "One table per prompt case; a clean cell is verbatim `n/N` (chars of the answer "
           f"found verbatim in the case's messages / answer length); a bad cell is bold.{columns_legend()}", ""]
    for case, cds in groups:
        short, corner = short_labels(cds)
        notes = Footnotes(texts)
        out += [f"### Case {code(case)}" if case else "### The document prompt", ""]
        note = case_note(case, manifests) if case else ""
        if note:
            out += [note, ""]
        out += [render_results_table(cds, notes, full=full), ""]
        fn = notes.render(len(cds) > 1, short)
        if fn:  # the case named in the lead: a long report's split moves these first
            out += [fn.replace("Non-ok cells (", f"Non-ok cells of case {code(case or '–')} (", 1),
                    ""]
        ladder = render_ladder(cds, short, corner)
        if ladder:
            out += [ladder.replace("## Ladder: ", f"#### Ladder ({escape_text(case or '')}): ", 1),
                    ""]
    out += ["## Summary per configuration and case", ""]
    for case, cds in groups:
        for cd in cds:
            text = render_config_summary(cd, planned or None, full, **summary)
            head, _, rest = text.partition("\n")
            out += [head + case_suffix(case) + "\n" + rest, ""]
    return out


def write_report(records: RecordsIn, manifests: list[dict] | list[RunManifest] | None, path, *,
                 full: bool = False, **kwargs: Any) -> pathlib.Path:
    """Render and write the report (``harness.publish.outfile``: a file replaced atomically, a
    link written through, a device or FIFO written in place); returns its path."""
    from ..publish.outfile import write_output
    p = pathlib.Path(path)
    write_output(p, render_markdown(records, manifests, full=full, **kwargs))
    return p


def load_inputs(paths: Iterable, out_dir="results"
                ) -> tuple[list[PhaseRecord], list[RunManifest]]:
    """Records and manifests of results files / run ids, typed (convenience for the CLI)."""
    from ..records.store import load_records, resolve_results, run_manifest_for

    paths = list(paths)
    records = load_records(paths, out_dir)
    manifests = []
    for ref in paths:
        m = run_manifest_for(resolve_results(ref, out_dir))
        if m is not None:
            manifests.append(m)
    return records, manifests
