"""A results-table cell is a typed view (``report/model.Cell``) built from typed records:
what several documents and an auto run's two passes add travels in the cell, not as
private keys inside a record (``_docs``, ``_fresh``, ``_disagree`` before)."""
from __future__ import annotations

import dataclasses

import pytest

from harness.report.cells import Footnotes, cell_markdown
from harness.report.model import Cell, Disagreement, combine_cell, group_configs
from harness.report.sections import summary_counts
from harness.records.phase_record import PhaseRecord, typed
from tests.reports import synth

CFG = synth.make_config()


def _auto(doc: int, isolation: str, verdict: str) -> dict:
    rec = synth.record(CFG, 4, "self-hit", isolation=isolation, verdict=verdict,
                       answer=synth.PASSAGE if verdict == "ok" else "")
    return {**rec, "document_seed": doc, "isolation_run": "auto"}


def test_one_record_is_its_own_cell_and_carries_nothing_else():
    rec = synth.record(CFG, 4, "cold")
    cell = combine_cell(typed([rec]))   # the report model reads PhaseRecords
    assert cell == Cell(PhaseRecord.from_dict(rec))
    assert (cell.documents, cell.fresh, cell.disagree) == (None, 0, ())
    assert cell_markdown(cell) == "794/794"


def test_an_auto_cell_says_its_documents_fresh_confirmation_and_disagreement():
    recs = [_auto(0, "reset", "ok"), _auto(0, "fresh", "broken"),
            _auto(1, "reset", "ok"), _auto(1, "fresh", "ok")]
    cell = combine_cell(typed(recs))
    assert cell.record.document_seed == 0 and cell.verdict == "broken"   # the worst document
    assert cell.documents == (1, 2) and cell.fresh == 2
    assert cell.disagree == (Disagreement(0, "ok", "broken", "reset"),)
    assert cell_markdown(cell, "†1") == ("**empty, `stop`, 3.76 tok/step, 1/2 documents; "
                                         "fresh; ⚠ reset ok, fresh broken (document 0)** †1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cell.fresh = 0
    # the record that speaks for the cell is the record as read: no key was added to it
    assert cell.record.as_dict() == recs[1]


def test_a_footnote_holds_the_cells_record():
    recs = [_auto(0, "reset", "ok"), _auto(0, "fresh", "broken")]
    cd = group_configs(typed(recs))[0]
    notes = Footnotes()
    mark = notes.mark(cd, cd.cell(4, "self-hit"))
    assert mark == "†1" and notes.items[0].record.isolation == "fresh"
    assert notes.items[0].residues == [4] and notes.items[0].phases == ["self-hit"]


def test_an_auto_cell_no_fresh_server_judged_says_so_and_is_not_plainly_clean():
    """Issue 33 item 4: residues 12-19 ok on auto's restore pass, fresh confirmations of
    the sample 12, 14, 18, 19 only. The other four were judged by restore alone, which
    can differ from fresh at a broken cell (docs/isolation.md): each such cell says
    `restore only`, and the summary does not count them among the plain clean."""
    def rec(res, phase, iso):
        r = synth.record(CFG, res, phase, isolation=iso)
        return {**r, "document_seed": 0, "isolation_run": "auto"}
    recs = [rec(res, ph, "restore") for res in range(12, 20) for ph in ("cold", "self-hit")]
    recs += [rec(res, ph, "fresh") for res in (12, 14, 18, 19) for ph in ("cold", "self-hit")]
    cd = group_configs(typed(recs))[0]
    assert cell_markdown(cd.cell(13, "cold")) == "794/794, restore only"
    assert cell_markdown(cd.cell(12, "cold")) == "794/794, fresh"
    assert cd.cell(13, "cold").judged_by == "restore" and cd.cell(12, "cold").judged_by == "fresh"
    assert summary_counts(cd) == ("4 clean, 4 clean on restore only (no fresh server judged "
                                  "them): residues 13, 15–17")
