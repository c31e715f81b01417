"""The ablation ladder of ``sweep explain``: one table per explained cell, in the thread's
format (each row the one axis changed, the cell's verdict), and the closing line that
names the discriminators.

Input: the manifest of an explain run (its ``explains`` block names the parent run, the
cells explained and, per rung, the configuration that ran it) and that run's records.
A cell whose unchanged rerun comes back ok is *not reproduced*, and one whose unchanged
rerun could not judge it (boot-fail, timeout where it broke, invalid, unjudged) is
*inconclusive*: either way its ladder is printed, but nothing is called a discriminator.
A cell is one configuration, residue, document and prompt case: a run over several
documents or cases gets one ladder per document and case, each read from its own records.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from ..judge import bugb
from ..records.manifest import RunManifest, as_manifest
from ..records.manifest_blocks import ExplainRung, ExplainsLink, ExplainTarget
from ..text.ghmarkdown import bold, code, escape_text, table
from ..text.plaintext import align_table, display_width, inline_to_plain
from ..names.verdict import BUG_VERDICTS, CLEAN, EXPLAINED, VerdictName
from ..names.phase import PhaseName, phase_key
from ..records.phase_record import PhaseRecord
from ..records.recordkeys import document_of, latest_records
from .cells import cell_markdown
from .model import Cell

__all__ = ["UNCHANGED", "EXPLAINED", "Rung", "Ladder", "ladders", "render_ladder",
           "render_ladder_plain",
           "render_explained", "explains_of", "closing_line", "hit_unit", "same_failure"]

UNCHANGED = "none (the cell as run)"
# EXPLAINED (harness.names.verdict): the verdicts explain reruns: a judged bad answer, or a
# server that died or hung on the cell. unjudged (nothing to compare), boot-fail, invalid
# and infra say nothing about the cell's answer, so there is nothing there to explain.


def same_failure(parent: str, rerun: str | None) -> bool:
    """Does a rerun verdict reproduce the parent's? A bad answer again (broken and
    diverged are one family: the same corruption can cut early or late), or the same
    crash / timeout; anything else did not reproduce it, or could not judge it."""
    if rerun is None:
        return False
    if parent in BUG_VERDICTS:
        return rerun in BUG_VERDICTS
    return rerun == parent


@dataclass
class Rung:
    label: str                         # "graph mode → PIECEWISE"
    axis: str                          # "graph mode"
    records: dict[str, PhaseRecord]    # phase -> record of this rung's rerun
    note: str = ""                     # why the rung did not run (not applicable)

    def outcome(self, phases: list[str], unchanged: "Rung | None" = None) -> str:
        """clean | stays | same-tail | inconclusive | not-run over the explained phases.

        ``same-tail``: the rung moved the hit unit (e.g. match unit -> none: the server's
        hit unit became the hybrid page) yet every explained hit still left the same
        computed tail as the unchanged rerun, so it never asked the question it names."""
        if self.note:
            return "not-run"
        verdicts = [self.records[p].verdict if p in self.records else None for p in phases]
        if any(v is None for v in verdicts):
            return "inconclusive"
        if all(v in CLEAN for v in verdicts):
            return "clean"
        if any(v in BUG_VERDICTS or v == VerdictName.CRASH for v in verdicts):
            return "same-tail" if unchanged and self._same_tail(phases, unchanged) else "stays"
        return "inconclusive"   # boot-fail, timeout, invalid, infra: the rung tells nothing

    def _same_tail(self, phases: list[str], unchanged: "Rung") -> bool:
        hits = [p for p in phases if p != PhaseName.COLD]
        if not hits:
            return False
        for p in hits:
            a, b = self.records.get(p), unchanged.records.get(p)
            if a is None or b is None:   # a phase not rerun has no hit unit
                return False
            ua, ub = hit_unit(a), hit_unit(b)
            if ua is None or ub is None or ua == ub:
                return False
            if a.computed_tail is None or a.computed_tail != b.computed_tail:
                return False
        return True

    def tail_note(self, phases: list[str], unchanged: "Rung") -> str:
        p = next(p for p in phases if p != PhaseName.COLD)
        a, b = self.records[p], unchanged.records[p]
        return (f"{self.label}: the hit unit went {hit_unit(b)} → {hit_unit(a)}, yet the "
                f"{a.templated_len}-token prompt still leaves a {a.computed_tail}"
                f"-token tail, so this rung cannot separate {self.axis}; explain a run whose "
                f"lengths are not ≡ {a.computed_tail} mod {hit_unit(a)} (another --context)")


def hit_unit(record: PhaseRecord) -> int | None:
    """The unit a record's cache hits came in (``bugb.hit_unit`` of its effective
    configuration; None when nothing says)."""
    return bugb.hit_unit(record.config or {})[0]


@dataclass
class Ladder:
    parent_run: str
    config_label: str
    residue: int
    phases: dict[str, str]             # explained phase -> the parent's verdict
    unchanged: Rung
    rungs: list[Rung] = field(default_factory=list)
    where: str = ""                    # "document 1", "case chat-1": set when it tells cells apart

    @property
    def reproduced(self) -> bool:
        """Every explained phase fails the same way again on the unchanged configuration
        (a boot-fail, an invalid or an unjudged rerun reproduces nothing)."""
        recs = self.unchanged.records
        return all(same_failure(v, recs[p].verdict if p in recs else None)
                   for p, v in self.phases.items())

    @property
    def came_back_ok(self) -> bool:
        """Every explained phase came back ok: not reproduced (else: inconclusive)."""
        recs = self.unchanged.records
        return all(p in recs and recs[p].verdict in CLEAN for p in self.phases)

    def by_axis(self, outcome: str) -> list[str]:
        """Axes whose every run rung has ``outcome``, named by axis; an axis whose rungs
        disagree is named rung by rung."""
        out: list[str] = []
        axes: dict[str, list[Rung]] = {}
        for r in self.rungs:
            if not r.note:
                axes.setdefault(r.axis, []).append(r)
        phases = list(self.phases)
        for axis, rungs in axes.items():
            got = [r.outcome(phases, self.unchanged) for r in rungs]
            if all(g == outcome for g in got):
                out.append(axis)
            elif len(rungs) > 1:
                out += [r.label for r, g in zip(rungs, got) if g == outcome]
        return out


def explains_of(manifest: dict | RunManifest | None) -> ExplainsLink | None:
    """The ``explains`` block of an explain run's manifest (the manifest as read or
    typed; None for any other run)."""
    m = as_manifest(manifest) if manifest else None
    return m.explains if m is not None and m.explained_run else None


def ladders(manifest: dict | RunManifest, records: list[PhaseRecord]) -> list[Ladder]:
    """The ladders of one explain run (its records), in the order its
    cells were named. A target names its document and case (explain runs since issue
    23); an older one matches any."""
    block = explains_of(manifest)
    if block is None:
        return []
    recs, _ = latest_records(records)
    by_point: dict[tuple, dict[str, PhaseRecord]] = {}
    for r in recs:
        key = (r.config_id, r.case_id, r.residue, document_of(r))
        by_point.setdefault(key, {})[r.phase] = r
    targets = [t for t in block.targets or () if isinstance(t, ExplainTarget)]
    several_docs = len({t.document for t in targets}) > 1 or len(block.documents or ()) > 1
    out = []
    for t in targets:
        residue = int(t.residue)

        def rung(spec: ExplainRung) -> Rung:
            got: dict[str, PhaseRecord] = {}
            if spec.config_id:
                for (c, case, res, doc), phases in by_point.items():
                    # a target written before documents (issue 23) matches any
                    if (c == spec.config_id and res == residue and case == t.case_id
                            and (t.document is None or doc == t.document)):
                        got = {**phases, **got}
            return Rung(spec.label, spec.label if spec.axis is None else spec.axis, got,
                        spec.note or "")

        specs = [s for s in t.rungs or () if isinstance(s, ExplainRung)]
        unchanged = next((rung(s) for s in specs if s.label == UNCHANGED), None)
        if unchanged is None:
            continue
        where = ", ".join(x for x in (
            f"case {t.case_id}" if t.case_id else "",
            f"document {t.document}" if several_docs and t.document is not None else "")
            if x)
        out.append(Ladder(block.run_id, "?" if t.config_label is None else t.config_label,
                          residue, dict(t.phases or {}), unchanged,
                          [rung(s) for s in specs if s.label != UNCHANGED], where))
    return out


def _row(rung: Rung, phases: list[str], bold_label: bool) -> list[str]:
    label = escape_text(rung.label)
    if rung.note:
        return [label] + ["not run: " + escape_text(rung.note)] + [""] * (len(phases) - 1)
    cells = [cell_markdown(Cell.of(rung.records.get(p))) for p in phases]
    return [bold(label) if bold_label else label] + cells


def _ladder_table(ladder: Ladder) -> tuple[list[str], list[list[str]]]:
    """The ladder's table as (header, rows) of markdown cells: a pipe table in the report,
    an aligned plain one on the terminal (``render_ladder_plain``)."""
    phases = sorted(ladder.phases, key=phase_key)
    header = ["changed axis"] + [f"residue {ladder.residue} {escape_text(p)}" for p in phases]
    rows = [_row(ladder.unchanged, phases, ladder.reproduced)]
    for r in ladder.rungs:
        rows.append(_row(r, phases, r.outcome(phases, ladder.unchanged) in ("stays", "same-tail")))
    return header, rows


def _ladder_intro(ladder: Ladder) -> tuple[str, str]:
    """(title, the sentence under it), markdown."""
    said = ", ".join(f"{escape_text(p)} {escape_text(v)}" for p, v in
                     sorted(ladder.phases.items(), key=lambda kv: phase_key(kv[0])))
    where = f" ({escape_text(ladder.where)})" if ladder.where else ""
    return (f"Residue {ladder.residue} of {code(ladder.config_label)}{where}",
            f"Run {code(ladder.parent_run)} had {said}; each row reruns residue "
            f"{ladder.residue} on fresh servers with one axis changed.")


def render_ladder(ladder: Ladder, level: str = "###") -> str:
    """One explained cell: the table and the closing line."""
    title, intro = _ladder_intro(ladder)
    header, rows = _ladder_table(ladder)
    return (f"{level} {title}\n\n{intro}\n\n" + table(header, rows) + "\n\n"
            + closing_line(ladder))


def render_ladder_plain(ladder: Ladder) -> str:
    """One explained cell as the terminal shows it (``sweep explain``'s stdout): the same
    title, table and closing line, each cell made plain and the table aligned."""
    title, intro = (inline_to_plain(x) for x in _ladder_intro(ladder))
    header, rows = _ladder_table(ladder)
    return "\n".join([title, "-" * min(display_width(title), 100), "", intro, "",
                      _plain_table(header, rows), "", inline_to_plain(closing_line(ladder))])


def closing_line(ladder: Ladder) -> str:
    cell = f"residue {ladder.residue} " + "/".join(sorted(ladder.phases, key=phase_key))
    skipped = [r for r in ladder.rungs if r.note]
    tail = ""
    if skipped:
        tail = " Not run: " + "; ".join(f"{escape_text(r.label)} ({escape_text(r.note)})"
                                        for r in skipped) + "."
    if not ladder.reproduced:
        got = ", ".join(f"{escape_text(p)} {escape_text(ladder.unchanged.records[p].verdict)}"
                        if p in ladder.unchanged.records else f"{escape_text(p)} not run"
                        for p in sorted(ladder.phases, key=phase_key))
        if ladder.came_back_ok:
            return (bold(f"Not reproduced: {cell} came back {got} on the unchanged rerun")
                    + ", so this ladder explains nothing; no axis is named a discriminator."
                    + tail)
        return (bold(f"Inconclusive: {cell} came back {got} on the unchanged rerun")
                + ", which neither reproduces the cell nor clears it, so this ladder explains "
                "nothing; no axis is named a discriminator." + tail)
    disc = ladder.by_axis("clean")
    non = ladder.by_axis("stays")
    unclear = ladder.by_axis("inconclusive")
    same = [r for r in ladder.rungs if r.outcome(list(ladder.phases), ladder.unchanged) == "same-tail"]
    parts = ["Reproduced on the unchanged rerun. " + bold("Discriminators")
             + f" (each alone cleans {cell}): "
             + (escape_text(", ".join(disc)) if disc else "none") + ".",
             "Not discriminators (the cell stays broken): "
             + (escape_text(", ".join(non)) if non else "none") + "."]
    if unclear:
        parts.append("Inconclusive (the rerun could not judge the cell): "
                     + escape_text(", ".join(unclear)) + ".")
    if same:
        parts.append("Neither (the changed axis left the cut where it was): "
                     + "; ".join(escape_text(r.tail_note(list(ladder.phases), ladder.unchanged))
                                 for r in same) + ".")
    return " ".join(parts) + tail


def render_explained(explained: list[tuple[RunManifest, list[PhaseRecord]]]) -> str:
    """The parent report's "Explained" section: every ladder of every explain run that
    links to it (``explained``: (manifest, records) of each)."""
    blocks = []
    for manifest, records in explained:
        for ladder in ladders(manifest, records):
            blocks.append(render_ladder(ladder, "###") + f"\n\nExplain run: {code(as_manifest(manifest).run_id or '?')}.")
    if not blocks:
        return ""
    return "## Explained\n\n" + "\n\n".join(blocks)


def _plain_table(header: list[str], rows: list[list[str]]) -> str:
    """The ladder's markdown cells as an aligned plain table."""
    return align_table([inline_to_plain(h) for h in header],
                       [[inline_to_plain(c) for c in r] for r in rows])
