"""A --prompts run's report groups by case: records split by ``case_id`` (each case then
reads like a run of its own: a table per case, a summary per configuration and case), and
the line under a case's heading saying where it came from and what judged it."""
from __future__ import annotations

from typing import Iterable

from ..text.ghmarkdown import code, escape_text
from ..records.phase_record import PhaseRecord
from ..records.manifest import RunManifest
from ..records.manifest_blocks import CaseFacts, PromptsBlock
from .model import ConfigData, group_configs

__all__ = ["case_groups", "case_note", "case_suffix"]


def case_groups(records: Iterable[PhaseRecord]) -> list[tuple[str | None, list[ConfigData]]]:
    """[(case id or None, its configurations)], cases in the order they first appear;
    records of a document-prompt run are the one group ``None``."""
    by: dict[str | None, list[PhaseRecord]] = {}
    for r in records:
        by.setdefault(r.case_id, []).append(r)
    return [(case, group_configs(recs)) for case, recs in by.items()]


def case_suffix(case: str | None) -> str:
    """`` · case `id` `` after a configuration's label (nothing for the document prompt)."""
    return f" · case {code(case)}" if case else ""


def case_note(case: str, manifests: list[RunManifest]) -> str:
    """Where a case came from and what judged it, from the run manifests (empty when no
    manifest describes it)."""
    for m in manifests:
        prompts = m.prompts if isinstance(m.prompts, PromptsBlock) else PromptsBlock()
        facts = (prompts.cases or {}).get(case)
        if not isinstance(facts, CaseFacts) or not facts:
            continue
        judged = ("its `expected` answer" if facts.expected
                  else f"the run's reference ({escape_text(str(m.reference or '?'))})")
        lens = [v for v in (facts.templated_len or {}).values() if v]
        span = (f"; templated length {min(v[0] for v in lens)}–{max(v[1] for v in lens)}"
                if lens else "")
        units = sorted({repr(u) for u in (facts.pad_unit or {}).values()})
        return (f"{code(str(prompts.file) + ':' + str(facts.line))}: padding "
                f"{', '.join(code(u) for u in units)} in "
                f"{escape_text(str(facts.pad))}{span}; judged by {judged}.")
    return ""
