"""Issue 36: the terminal's results table of the README's bug/fix matrix (four
configurations x two phases) was 327 columns wide, unreadable on a 150-column terminal.
Past the width (``COLUMNS``, else the terminal's) the table is split, one per
configuration under its short label; a pipe or a file keeps the one table."""
from __future__ import annotations

import os

from harness.text.plaintext import display_width
from harness.report import render_terminal
from harness.report.terminal import terminal_width
from tests.reports import synth

MATRIX = [synth.make_config(cudagraph=g, patches=p)
          for g in ("FULL_AND_PIECEWISE", "PIECEWISE") for p in ("none", "all")]


def _records():
    out = []
    for cfg in MATRIX:
        broken = [4] if cfg["cudagraph_mode"] != "PIECEWISE" and cfg["patches"] == "none" else []
        out += [dict(r, config_id=synth.config_id(cfg), config_label=synth.label(cfg))
                for r in synth.sweep(cfg, range(128), broken=broken)]
    return out


def _table_widths(text: str) -> list[int]:
    """Widths of the lines of every results table (from a header row to its blank line)."""
    widths, inside = [], False
    for ln in text.splitlines():
        if ln.startswith("residue") or set(ln) <= {"-", " "} and ln.strip():
            inside = True
        if inside and not ln.strip():
            inside = False
        if inside:
            widths.append(display_width(ln))
    return widths


def test_the_bug_fix_matrix_fits_a_150_column_terminal():
    recs = _records()
    whole = render_terminal(recs)
    assert max(_table_widths(whole)) == 320         # one table (the lab run: 327)
    split = render_terminal(recs, width=150)
    assert max(_table_widths(split)) == 59           # one table per configuration
    for short in ("FULL_AND_PIECEWISE patches=none", "FULL_AND_PIECEWISE patches=all",
                  "PIECEWISE patches=none", "PIECEWISE patches=all"):
        assert f"\n{short}:\n" in split
    assert "\nresidue 4            794/794  empty, stop, 1.00 tok/step †1\n" in split
    assert split.count("residues 0–127  794/794  794/794") == 3
    # a single configuration is never split, and a narrow enough matrix stays one table
    assert render_terminal(recs, width=1000) == whole


def test_columns_is_the_width_and_a_pipe_has_none(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    assert terminal_width() == 120
    monkeypatch.delenv("COLUMNS")
    if not os.isatty(1):
        assert terminal_width() is None
