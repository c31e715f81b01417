"""Issue 36: the terminal's results table of the README's bug/fix matrix (four
configurations x two phases) was 327 columns wide, unreadable on a 150-column terminal.
Past the width (``COLUMNS``, else the terminal's, else 120 for a pipe or a file: issue 50)
the table is split, one per configuration under its short label."""
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


def test_columns_is_the_width_and_a_pipe_has_120(monkeypatch):
    """Issue 50: a pipe or a file (a CI log) is read in a window too."""
    monkeypatch.setenv("COLUMNS", "100")
    assert terminal_width() == 100
    monkeypatch.delenv("COLUMNS")
    if not os.isatty(1):
        assert terminal_width() == 120


def _auto_records(cfgs) -> list[dict]:
    out = []
    for cfg in cfgs:
        broken = [4] if cfg["cudagraph_mode"] != "PIECEWISE" and cfg["patches"] == "none" else []
        for iso in ("restore", "fresh"):
            for doc in (0, 1):
                out += [dict(r, isolation_run="auto", document_seed=doc,
                             config_id=synth.config_id(cfg), config_label=synth.label(cfg))
                        for r in synth.sweep(cfg, range(128), broken=broken, isolation=iso)]
    return out


def test_every_line_fits_120_columns():
    """Issue 50: in 120 columns the summary lines (up to 730 wide), auto's table and a
    --url table whose row label was 99 wide all fit: prose wraps, tables split, a single
    configuration's table drops the label the title already says."""
    long_label = dict(synth.make_config(), spec="ngram", method="ngram")
    url = [dict(r, config_label="http://inference-gateway.internal.example:8000 · "
                "Qwen/Qwen3.5-27B-FP8 · ngram k=3 · unit 128 · FULL_AND_PIECEWISE")
           for r in synth.sweep(long_label, range(128), broken=[4])]
    for recs in (_records(), _auto_records(MATRIX), url):
        text = render_terminal(recs, width=120)
        wide = [ln for ln in text.splitlines() if display_width(ln) > 120]
        assert wide == []
    assert "residue 4" in render_terminal(url, width=120)


def test_a_long_invalid_reason_is_cut_in_the_cell_not_in_the_list():
    """A history that was not proven says why in the cell (90 characters); beside the other
    phases that made one configuration's table ~150 columns wide on the lab. Past the width
    the cell is cut, keeps its footnote mark, and the "Not ok" list says the whole reason."""
    why = ("history abort-retry not proven: no abort line of the request before its prefill "
           "ended (answer judged ok: matches the reference sha1)")
    cfg = synth.make_config(spec="ngram")
    recs = [dict(r, verdict="invalid", reason=why) if r["phase"] == "cold" and r["residue"] in (0, 1)
            else r for r in synth.sweep(cfg, range(6))]
    assert max(_table_widths(render_terminal(recs, width=1000))) > 100   # the cell as it was
    text = render_terminal(recs, width=100)
    assert [ln for ln in text.splitlines() if display_width(ln) > 100] == []
    rows = [ln for ln in text.splitlines() if ln.startswith("residue")]
    assert len(rows) == 6 and sum("invalid: history abort-retry" in ln and "… †1 " in ln
                                  for ln in rows) == 2
    assert "no abort line of the request" in text.split("Not ok:")[1]
