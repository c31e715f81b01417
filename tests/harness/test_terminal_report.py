"""Issue 27 item 8: the report a sweep prints is aligned plain text made from the report's
own rows (each cell made plain before it is padded), and short: the summary, the table,
the non-ok cells and where the rest is. Through the real entry point on the lab engine."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def display_width(text: str) -> int:
    """Terminal columns: a wide (CJK) character takes two (the test's own count)."""
    import unicodedata
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def sweep(tmp_path: Path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "harness", "--no-progress", "--out",
                           str(tmp_path / "o"), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)


def tables(text: str) -> list[list[str]]:
    """Each table of a plain report: its lines from the header to the last row (a table
    is found by its dashed separator line)."""
    lines = text.splitlines()
    out = []
    for i, ln in enumerate(lines):
        if ln and set(ln) <= {"-", " "} and "  " in ln and i > 0:
            j = i + 1
            while j < len(lines) and lines[j].strip():
                j += 1
            out.append([lines[i - 1], ln, *lines[i + 1:j]])
    return out


def assert_aligned(table: list[str]) -> None:
    """Every column starts at the same terminal column in every row."""
    sep = table[1]
    starts = [i for i, ch in enumerate(sep) if ch == "-" and (i == 0 or sep[i - 1] == " ")]
    for row in [table[0], *table[2:]]:
        cols = []
        for s in starts[1:]:   # the display column where each later cell begins
            prefix = next((row[:k] for k in range(len(row) + 1)
                           if display_width(row[:k]) == s), None)
            assert prefix is not None and prefix.endswith("  "), (s, row, table)
            cols.append(row[len(prefix)] if len(prefix) < len(row) else "")
        assert all(c != " " for c in cols), (row, table)


# a real sweep in a subprocess with real servers: e2e (issue 50: the auto mark missed it)
@pytest.mark.e2e
def test_a_broken_cell_does_not_shift_the_columns(tmp_path):
    proc = sweep(tmp_path, "--residues", "3-5", "--cudagraph", "FULL_AND_PIECEWISE",
                 "--patches", "none", "--slots", "2")
    assert proc.returncode == 1, proc.stderr[-2000:]
    found = tables(proc.stdout)
    assert found, proc.stdout
    for t in found:
        assert_aligned(t)
    assert "empty, stop †1" in proc.stdout and "**" not in proc.stdout
    # prose wraps in 120 columns (issue 50): read it with its line breaks as spaces
    assert "the sweep agrees: broken exactly at residue 4" in " ".join(proc.stdout.split())
    assert "†1" in proc.stdout.split("Not ok:", 1)[1]   # the non-ok cell, one line


# a real sweep in a subprocess with real servers: e2e (issue 50: the auto mark missed it)
@pytest.mark.e2e
def test_a_clean_run_prints_a_short_report(tmp_path):
    proc = sweep(tmp_path, "--residues", "0-3", "--slots", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) <= 20, proc.stdout
    assert "Effective configuration" not in proc.stdout   # in the file, not on the terminal
    (md,) = (tmp_path / "o").glob("*.md")
    assert "Effective configuration" in md.read_text()
    for t in tables(proc.stdout):
        assert_aligned(t)


def test_markdown_tables_made_plain_stay_aligned():
    """``sweep compare`` and ``sweep report`` on a terminal go through markdown_to_plain:
    a bold cell, a code span with an escaped pipe and a wide character keep the columns."""
    from harness.text.plaintext import markdown_to_plain
    md = ("| a | b |\n|---|---|\n| **bold** | `x \\| y` |\n| 字字 | plain |\n")
    t = markdown_to_plain(md).splitlines()
    assert t[2].startswith("bold  ") and "x | y" in t[2]
    assert_aligned(t)


def test_the_terminal_table_shows_untrusted_text_as_it_is_and_the_markdown_escapes_it():
    """The table is built once, of ``Phrase`` cells (issue 34): the terminal prints each
    cell's plain text, the report its markdown. A reason with backticks and a pipe is
    shown as it is on the terminal (the markdown-then-stripped path printed ``a\\b\\c``
    for ``a`b`c``) and escaped in the markdown, where it cannot open a code span."""
    import gzip
    import json

    from harness.report import render_markdown, render_terminal
    path = sorted((ROOT / "reports" / "h200" / "results").glob("*.jsonl.gz"))[0]
    rec = json.loads(gzip.open(path, "rt").readline())
    reason = "CUDA `cudaErrorLaunchFailure` | a`b`c"
    rec.update(verdict="boot-fail", reason=reason, log_excerpt=[], answer=None, sha1=None)
    plain = render_terminal([rec])
    assert f"boot-fail: {reason}" in plain, plain
    md = render_markdown([rec])
    assert "boot-fail: CUDA \\`cudaErrorLaunchFailure\\` \\| a\\`b\\`c" in md
