"""The report's baseline section: what ``--baseline`` gated on, cell by cell.

It renders the manifest's ``baseline`` block (``gate.gate_block``), so the report of a
gated run, its step summary and the Action's pull-request comment (which is the report)
name every regressed cell and every cell whose coverage was lost, with the old and new
verdict and the line that reruns it; ``sweep report`` of the run renders the same.
"""
from __future__ import annotations

from ..text.ghmarkdown import bold, code, escape_text, fence, table
from ..records.gate_block import BaselineBlock, GateCell
from ..records.manifest import RunManifest
from ..records.same_compile import bytes_phrase

__all__ = ["render_baseline"]

SHOWN = 40   # cells per table; the rest are counted (the JUnit and the records have all)


def render_baseline(manifests: list[RunManifest]) -> str:
    """``## Baseline`` for each manifest with a ``baseline`` block ("" when none)."""
    out = []
    for m in manifests:
        if isinstance(m.baseline, BaselineBlock):
            out.append(_section(m.baseline))
    return "\n\n".join(out)


def _section(block: BaselineBlock) -> str:
    regs, losses = list(block.regressions), list(block.losses)
    runs = ", ".join(code(r) for r in block.runs or []) or "–"
    verdict = bold("passed") if block.passed else bold("failed")
    allowed = " (accepted: `--allow-fewer`)" if losses and block.allow_fewer else ""
    lines = ["## Baseline", "",
             f"Gate {verdict} against {code(block.source)} (run {runs}): "
             f"{len(regs)} regressed cell{'s' if len(regs) != 1 else ''} (ok in the "
             f"baseline, not ok now), {len(losses)} cell{'s' if len(losses) != 1 else ''} "
             f"of lost coverage (judged in the baseline, missing or not judged now){allowed}.",
             ""]
    if not block.judged_any:
        lines += ["No cell of this run was judged (every one boot-fail, invalid, crash, "
                  "timeout, infra or unjudged): a gate that measured nothing does not pass.",
                  ""]
    for title, cells in (("Regressed", regs), ("Lost coverage", losses)):
        if cells:
            lines += [f"{title}:", "", _table(cells), ""]
            more = len(cells) - SHOWN
            if more > 0:
                lines += [f"... and {more} more (the JUnit's `{_suite(title)}` suite lists "
                          "every one).", ""]
    still = block.still_broken
    if still:   # issue 48: a broken answer's bytes hold only within one compile
        lines += [f"Still broken (known, not a regression): {len(still)} cell"
                  f"{'s' if len(still) != 1 else ''}; their bytes:", ""]
        lines += [f"- {code(c.config_label or '?')} residue {c.residue} "
                  f"{escape_text(str(c.phase))}: "
                  f"{escape_text(bytes_phrase({'bytes': c.bytes, 'why': c.why}))}"
                  for c in still[:SHOWN]] + [""]
    reruns = list(dict.fromkeys(c.rerun for c in regs + losses if c.rerun))
    if reruns:
        lines += ["Rerun them:", "", fence("\n".join(reruns[:SHOWN]), "sh"), ""]
    return "\n".join(lines).rstrip()


def _suite(title: str) -> str:
    return "regression" if title == "Regressed" else "coverage"


def _table(cells: list[GateCell]) -> str:
    rows = [[code(c.config_label or c.config_id or "?"), str(c.residue),
             escape_text(str(c.phase)),
             f"{escape_text(str(c.old_verdict))} → "
             f"{bold(escape_text(str(c.new_verdict or 'missing')))}"]
            for c in cells[:SHOWN]]
    return table(["configuration", "residue", "phase", "baseline → now"], rows)
