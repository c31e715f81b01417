"""The report's sections: the results table, the thread view, the per-configuration
summary, the rerun lines and the ladder (the provenance table: ``provenance.py``)."""
from __future__ import annotations

import re
from collections import defaultdict

from ..text.ghmarkdown import bold, code, details, escape_text, fence, table
from ..text.phrase import Code, Phrase, Strong, Text
from ..text.ranges import residues_phrase
from ..names.verdict import BUG_VERDICTS, CLEAN, SEVERITY
from ..names.phase import phase_key
from ..records.phase_record import NOT_IDENTITY
from ..records.recordkeys import cell_key
from ..records.manifest import RunManifest
from .auto import config_auto_line
from .divergence import final_chunk_line
from .traffic import traffic_line
from .bugb_analysis import agreement, config_hit_granularity, predict_bug_b
from .cells import Footnotes, cell_markdown, cell_view
from .columns import COLUMNS, Column
from .model import (SHORT_NAMES, VOLATILE, ConfigData, config_fields, describe_dim, fmt_value,
                    miss_sentence, varying_fields)
from ..names.isolation import IsolationName

__all__ = ["short_labels", "short_words", "render_results_table", "results_rows", "render_thread_view", "summary_counts",
           "render_config_summary", "render_reruns", "render_ladder",
           "FOLD_ABOVE"]

FOLD_ABOVE = 12             # tables with more rows than this fold their clean rows


def _row_label(residue: int, bad: bool) -> str:
    return _row_words(residue, bad).markdown()


def _row_words(residue: int, bad: bool) -> Phrase:
    return _strong_if(Phrase.of(f"residue {residue}"), bad)


def _strong_if(words: Phrase, bad: bool) -> Phrase:
    return Phrase.of(Strong(words)) if bad else words


Row = tuple[int, list[Phrase], list, bool]   # residue, phase cells, declared columns' values, all ok


def _fold_rows(rows: list[Row], full: bool, columns: list[Column]) -> list[list[Phrase]]:
    """Rows with identical phase cells fold into one line placed where the first of them
    was: clean rows (``residues 0–3, 5–127 | 794/794``) and identical bad rows alike (a
    boot failure at every residue is one line, bold); a declared column's cell of a
    folded line is its values' ``Column.folded``."""
    if full or len(rows) <= FOLD_ABOVE:
        return [[_row_words(res, not ok)] + cells + [c.cell(v) for c, v in zip(columns, vals)]
                for res, cells, vals, ok in rows]
    clean_groups = {tuple(cells) for _, cells, _, ok in rows if ok}
    if len(clean_groups) > 4:
        # Too varied to fold by value: fold all clean rows, say that N varies.
        ncol = len(rows[0][1])
        varied = [Phrase.of("clean (n/N varies)")] * ncol
        rows = [(res, varied if ok else cells, vals, ok) for res, cells, vals, ok in rows]
    groups: dict[tuple, list[int]] = defaultdict(list)
    values: dict[tuple, list[list]] = defaultdict(list)
    ok_of: dict[tuple, bool] = {}
    for res, cells, vals, ok in rows:
        groups[tuple(cells)].append(res)
        values[tuple(cells)].append(vals)
        ok_of[tuple(cells)] = ok
    first_of = {min(v): k for k, v in groups.items()}
    out = []
    for res, *_ in rows:
        if res in first_of:
            key = first_of[res]
            label = Phrase.of(residues_phrase(groups[key]))
            out.append([_strong_if(label, not ok_of[key])] + list(key) + [
                c.folded([vals[i] for vals in values[key]]) for i, c in enumerate(columns)])
    return out


def short_labels(configs: list[ConfigData]) -> tuple[dict[str, str], str]:
    """``short_words`` as markdown."""
    short, corner = short_words(configs)
    return {k: v.markdown() for k, v in short.items()}, corner.markdown()


def short_words(configs: list[ConfigData]) -> tuple[dict[str, Phrase], Phrase]:
    """Column headers that name only what differs between configurations, and the common
    part (the table's corner), e.g. ``FULL_AND_PIECEWISE`` / ``SPEC=mtp CTX=huge k=3``."""
    dicts = [c.identity for c in configs]
    vary = varying_fields(dicts) if all(dicts) else []
    if len(configs) < 2 or not vary:
        common = configs[0].label if len(configs) == 1 else "configuration"
        return {c.config_id: Phrase.of(Code(c.label)) for c in configs}, Phrase.of(Code(common))
    short = {}
    for c in configs:
        short[c.config_id] = " ".join(describe_dim(n, c.identity.get(n)) for n in vary)
    base = configs[0].identity
    common_parts = []
    for n in ("spec", "ctx", "draft_tokens", "cudagraph_mode", "block_size",
              "prefix_match_unit", "patches", "geometry"):
        if n in vary or n not in base:
            continue
        if n == "draft_tokens" and not base.get("method"):
            continue
        if n == "geometry" and not base.get(n):
            continue
        part = describe_dim(n, base.get(n))
        # the corner shows what the server ran; the labels say what was asked (vLLM runs
        # the hybrid's attention with block 256 when 128 is asked): name both
        asked = (configs[0].requested or {}).get(n)
        if asked is not None and asked != base.get(n):
            part += f" (asked {asked})"
        common_parts.append(part)
    return ({k: Phrase.of(Text(v)) for k, v in short.items()},
            Phrase.of(Code(" ".join(common_parts)) if common_parts else "configuration"))


def render_results_table(configs: list[ConfigData], notes: Footnotes, *, full: bool) -> str:
    """The results table as a GFM pipe table (the terminal's: ``terminal.py``)."""
    short, corner = short_words(configs)
    header, rows = results_rows(configs, notes, full=full, short=short, corner=corner)
    return table([h.markdown() for h in header], [[c.markdown() for c in r] for r in rows])


def results_rows(configs: list[ConfigData], notes: Footnotes, *, full: bool,
                 short: dict[str, Phrase], corner: Phrase
                 ) -> tuple[list[Phrase], list[list[Phrase]]]:
    """The results table as (header, rows) of ``Phrase`` cells: the markdown report makes
    a pipe table of their markdown, the terminal an aligned one of their plain text
    (``report/terminal.py``): nothing is rendered to markdown and taken out again."""
    phases = sorted({p for c in configs for p in c.phases}, key=phase_key)
    residues = sorted({r for c in configs for r in c.residues})
    if len(configs) == 1:
        cd = configs[0]
        header = [corner] + [Phrase.of(Text(p)) for p in phases]
        cols = [(cd, p) for p in phases]
    else:
        header = [corner] + [Phrase.of(short[c.config_id], " ", Text(p)) if len(phases) > 1
                             else short[c.config_id] for c in configs for p in phases]
        cols = [(c, p) for c in configs for p in phases]
    extra = [(cd, col) for col in COLUMNS for cd in configs]   # report/columns.py
    header += [Phrase.of(short[cd.config_id], " ", Text(col.header)) if len(configs) > 1
               else Phrase.of(Text(col.header)) for cd, col in extra]
    rows = []
    for res in residues:
        recs = [(cd, cd.cell(res, p)) for cd, p in cols]
        # a cell that was not run is not a bad cell (another configuration swept less)
        ok = all(c.verdict in CLEAN and not c.disagree for _, c in recs
                 if c is not None and not c.reference)
        cells = [cell_view(r, notes.mark(cd, r)) for cd, r in recs]
        rows.append((res, cells, [col.value(cd, res) for cd, col in extra], ok))
    return header, _fold_rows(rows, full, [col for _, col in extra])


def render_thread_view(configs: list[ConfigData], phase: str, short: dict[str, str],
                       corner: str) -> str:
    """The thread's other shape: configurations as rows, a few residues as columns, one
    measured phase (mjungnickel18's FULL_AND_PIECEWISE / PIECEWISE table)."""
    residues = sorted({r for c in configs for r in c.residues})
    bad_res = {res for c in configs for res in c.residues
               if c.cell(res, phase) is not None and c.cell(res, phase).verdict not in CLEAN}
    header = [f"{corner} {escape_text(phase)}"] + [
        _row_label(r, r in bad_res) for r in residues]
    rows = [[short[c.config_id]] + [cell_markdown(c.cell(r, phase)) for r in residues]
            for c in configs]
    return table(header, rows)


def summary_counts(cd: ConfigData) -> str:
    statuses = cd.statuses()
    by: dict[str, list[int]] = defaultdict(list)
    for res, s in statuses.items():
        by[s].append(res)
    weak: dict[str, list[int]] = defaultdict(list)
    for res in by.get("ok", []):
        isos = {c.judged_by for ph in cd.phases if (c := cd.cell(res, ph)) is not None}
        if isos - {"fresh"}:
            weak[", ".join(sorted(isos - {"fresh"}))].append(res)
    plain = len(by.get("ok", [])) - sum(map(len, weak.values()))
    parts = [f"{plain} clean"] if plain or not weak else []
    # an ok on a reused server is not a fresh server's ok (docs/isolation.md): said here
    parts += [f"{len(rs)} clean on {escape_text(iso)} only (no fresh server judged them): "
              f"{residues_phrase(rs)}" for iso, rs in sorted(weak.items())]
    for s in SEVERITY:
        if s in CLEAN or s not in by:
            continue
        parts.append(f"{len(by[s])} {s}: {residues_phrase(by[s])}")
    return ", ".join(parts) + reference_note(cd)


def reference_note(cd: ConfigData) -> str:
    """``; the 3 cold cells are the reference (--reference cold), not judged: ...`` when
    some of this configuration's cells are what the others were judged against."""
    refs = [r for r in cd.records if cell_key(r) in cd.references]
    if not refs:
        return ""
    phases = ", ".join(sorted({str(r.phase) for r in refs}, key=phase_key))
    how = refs[0].reference or "?"
    n = len(refs)
    return (f"; {'the ' if n > 1 else ''}{n} {escape_text(phases)} cell{'s' if n != 1 else ''} "
            f"{'are' if n != 1 else 'is'} the reference (`--reference {escape_text(how)}`), "
            "not judged: the other cells were judged against "
            f"{'them' if n != 1 else 'it'}")


def _broken_phases(cd: ConfigData) -> str:
    """The phases of bad cells, by verdict ("broken on: cold; diverged on: self-hit"): a
    diverged cell is not called broken. Read off the cells (the latest records)."""
    by: dict[str, set[str]] = defaultdict(set)
    for res in cd.residues:
        for ph in cd.phases:
            c = cd.cell(res, ph)
            if c is not None and c.verdict in BUG_VERDICTS:
                by[c.verdict].add(ph)
    return "; ".join(f"{escape_text(v)} on: " + ", ".join(
        escape_text(p) for p in sorted(by[v], key=phase_key)) for v in sorted(by))


def render_config_summary(cd: ConfigData, manifest_residues: list[int] | None,
                          full: bool, *, interrupted: list[RunManifest] | None = None) -> str:
    """``interrupted``: manifests of runs that did not finish (those of this
    configuration's records are named in its auto line)."""
    lines = [f"### {code(cd.label)}", "", *_coverage_lines(cd, manifest_residues),
             *_result_lines(cd, interrupted), *_cache_lines(cd), *_mismatch_lines(cd),
             _patches_line(cd), "",
             details("Effective configuration and rerun commands",
                     _effective_line(cd).removeprefix("- ") + "\n\n" + render_reruns(cd, full))]
    return "\n".join(lines)


def _coverage_lines(cd: ConfigData, manifest_residues: list[int] | None) -> list[str]:
    m, covered = cd.modulus, cd.residues
    phases = ", ".join(escape_text(p) for p in cd.phases)
    cov = f"{len(covered)} of {m} residues (mod {m})"
    if len(covered) < m:
        cov += f": {residues_phrase(covered)}"
    lines = [f"- **Coverage:** {cov}; phases {phases}; {len(cd.records)} phase records."]
    missing = sorted(set(manifest_residues or ()) - set(covered))
    if missing:
        lines.append(f"- **Missing:** planned but not on disk: {residues_phrase(missing)} "
                     "(interrupted or resumed run).")
    return lines


def _result_lines(cd: ConfigData, interrupted: list[RunManifest] | None) -> list[str]:
    """Result, the rule's prediction, traffic, isolation auto and the documents."""
    pred = predict_bug_b(cd)
    result = summary_counts(cd)
    bp = _broken_phases(cd)
    if bp:
        result += f" ({bp})"
    lines = [f"- **Result:** {result}.", f"- **Bug B rule:** {pred.why}; {agreement(cd, pred)}."]
    traffic = traffic_line(cd)
    if traffic:
        lines.append(traffic)
    runs = {r.run_id for r in cd.records}
    stopped = [m for m in interrupted or [] if m.run_id in runs]
    auto_line = config_auto_line(cd.records, stopped)
    if auto_line:
        lines.append(f"- **Isolation auto:** {auto_line}")
    docs = cd.distinct("document_seed")
    if IsolationName.LIVE in cd.distinct("isolation"):
        lines.append(f"- **Documents:** {len(docs)}, one per point (a live server: isolation "
                     "by content).")
    elif len(docs) > 1:
        lines.append(f"- **Documents:** seeds {', '.join(str(d) for d in sorted(docs))}; a "
                     "cell counts the documents it is not ok on.")
    return lines


def _cache_lines(cd: ConfigData) -> list[str]:
    """The final chunk, the sampling sentence and the cache-hit granularity."""
    m, lines = cd.modulus, []
    k = cd.config.get("draft_tokens") if cd.config.get("spec") not in (None, "none") else None
    chunk = final_chunk_line(cd, int(k) + 1 if k else None)
    if chunk:
        lines.append(chunk)
    if len(cd.residues) < m:
        lines.append(f"- **Sampling:** {miss_sentence(len(cd.residues), m)}")
    g, nvals = config_hit_granularity(cd)
    if g and nvals >= 2 and g > m:
        lines.append(f"- **Cache-hit granularity:** the {nvals} distinct `cached_tokens` values "
                     f"are all multiples of {g} (their gcd): hits land on {g}-token units, "
                     f"which a mod-{m} sweep cannot resolve. Set `--prefix-match-unit {m}` "
                     f"or sweep modulo {g}.")
    elif (cd.config.get("effective_hash_unit") or 0) > m:
        u = int(cd.config["effective_hash_unit"])
        lines.append(f"- **Cache-hit granularity:** the server reports cache hits in {u}-token "
                     f"units, which a mod-{m} sweep cannot resolve. Set "
                     f"`--prefix-match-unit {m}` or sweep modulo {u}.")
    return lines


def _effective_line(cd: ConfigData) -> str:
    ident = cd.identity
    eff = " ".join(f"{n}={fmt_value(n, cd.config.get(n, ident.get(n)))}"
                   for n in config_fields([ident]) if n in ident
                   and (ident.get(n) is not None or n == "prefix_match_unit"))
    extra = " ".join(f"{n}={fmt_value(n, v)}" for n, v in sorted(cd.config.items())
                     if n not in ident and n not in VOLATILE and n not in NOT_IDENTITY
                     and v is not None)
    line = f"- **Effective configuration:** {code(eff) if eff else '–'}"
    if extra:
        line += f"; the server reported {code(extra)}"
    return line


def _mismatch_lines(cd: ConfigData) -> list[str]:
    """What the server runs that was not asked, the preset's overrides and warnings."""
    lines = []
    mism = sorted({f for r in cd.records for f in (r.config_mismatch or [])})
    if mism:
        detail = []
        for f in mism:
            if re.fullmatch(r"[A-Za-z_]\w*", f):  # a bare field name: say both values
                detail.append(f"{f}: asked {fmt_value(f, cd.requested.get(f))}, "
                              f"got {fmt_value(f, cd.config.get(f))}")
            else:  # already a sentence ("max_model_len: requested 245760, server runs …")
                detail.append(f)
        lines.append("- **Config mismatch:** " + escape_text("; ".join(detail)))
    overrides = cd.config.get("overrides") or []
    if overrides:
        lines.append("- **Overrides:** " + escape_text("; ".join(map(str, overrides))))
    notes = [n for n in (cd.config.get("notes") or []) if str(n).startswith("WARNING")]
    for n in notes:
        lines.append("- **Preset warning:** " + escape_text(str(n)))
    return lines


def _patches_line(cd: ConfigData) -> str:
    pstatus = cd.first("patch_status")
    patches = cd.config.get("patches") or cd.first("patches")
    pline = f"- **Patches:** {code(str(patches))}" if patches else "- **Patches:** –"
    if isinstance(pstatus, dict) and pstatus:
        pline += "; engine reports " + ", ".join(
            f"{escape_text(k)}: {escape_text(str(v))}" for k, v in sorted(pstatus.items()))
    elif pstatus is None:
        pline += "; engine reported no patch status"
    return pline


def render_reruns(cd: ConfigData, full: bool) -> str:
    """The command lines that rerun this configuration's cells: every non-ok point's, and
    one clean point's as the pattern for the rest (all of them with ``full``)."""
    by_res: dict[int, str] = {}
    for r in sorted(cd.records, key=lambda r: (r.residue, phase_key(r.phase or ""))):
        if r.rerun:
            by_res.setdefault(int(r.residue), r.rerun)
    if not by_res:
        return "Rerun: no `rerun` command recorded."
    statuses = cd.statuses()
    bad = [res for res in sorted(by_res) if statuses.get(res) not in CLEAN]
    good = [res for res in sorted(by_res) if statuses.get(res) in CLEAN]
    lines = []
    shown = set()
    for res in (sorted(by_res) if full else bad + good[:1]):
        cmd = by_res[res]
        if cmd in shown:
            continue
        shown.add(cmd)
        tag = "clean" if statuses.get(res) in CLEAN else statuses.get(res)
        lines.append(f"# residue {res} ({tag})")
        lines.append(cmd)
    rest = len(good) - 1
    more = "" if full or rest < 1 else (
        " (one clean point shown; the other clean point reruns the same way with its "
        "residue)" if rest == 1 else
        f" (one clean point shown; the other {rest} clean points rerun the same way with "
        "their residue)")
    return f"Rerun a cell{more}:\n\n" + fence("\n".join(lines), "sh")


def render_ladder(configs: list[ConfigData], short: dict[str, str], corner: str) -> str:
    """Configurations that differ in one or two dimensions (the thread's block / match-unit
    table): one row each, what Bug B did, what the rule predicted."""
    dicts = [c.identity for c in configs]
    if len(configs) < 2 or not all(dicts):
        return ""
    vary = varying_fields(dicts)
    if not 1 <= len(vary) <= 2:
        return ""

    def sort_key(c: ConfigData):
        ident = c.identity
        return tuple((ident.get(n) is not None, str(type(ident.get(n))),
                      ident.get(n) if ident.get(n) is not None else 0) for n in vary)

    try:
        ordered = sorted(configs, key=sort_key)
    except TypeError:
        ordered = configs
    header = [escape_text(SHORT_NAMES.get(n, n)) for n in vary] + [
        "residues swept", "Bug B", "rule predicts"]
    rows = []
    for c in ordered:
        statuses = c.statuses()
        by: dict[str, list[int]] = defaultdict(list)
        for res, s in statuses.items():
            if s not in CLEAN:
                by[s].append(res)
        if not by:
            outcome = "clean"
        else:
            parts = []
            for s, v in sorted(by.items(), key=lambda kv: SEVERITY.index(kv[0])
                               if kv[0] in SEVERITY else 0):
                word = "broken" if s in BUG_VERDICTS else s
                parts.append(f"{word} at {residues_phrase(v)}")
            outcome = "; ".join(parts)
        pred = predict_bug_b(c)
        if pred.residues is None:
            predicted = (f"no residue mod {c.modulus} (hits in {pred.unit}-token units)"
                         if pred.unit else f"no residue mod {c.modulus} (hit unit unknown)")
        elif not pred.residues and pred.watch:   # named to measure, not predicted
            predicted = "measure " + residues_phrase(pred.watch)
        elif not pred.residues:
            predicted = "clean"
        else:
            predicted = "broken at " + residues_phrase(pred.residues)
        cells = [escape_text(fmt_value(n, c.identity.get(n))) for n in vary] + [
            f"{len(statuses)}/{c.modulus}", bold(outcome) if by else outcome, predicted]
        if by:
            cells[0] = bold(cells[0])
        rows.append(cells)
    dims = " × ".join(escape_text(SHORT_NAMES.get(n, n)) for n in vary)
    return (f"## Ladder: {dims}\n\nEverything else equal: {corner}.\n\n" + table(header, rows))
