"""Escaping of untrusted text: what GitHub would render, checked through cmark-gfm."""
from __future__ import annotations

import pytest

from .gfm import gfm_html, gfm_tables, parse_html
from harness.text.ghmarkdown import ZWJ, cap, code, escape_text, fence, neutralise, table

HOSTILE = ("a|b `tick` <script>alert(1)</script> <img src=x onerror=y> @someone #1 GH-12 "
           "owner/repo#34 *bold* _em_ [link](http://evil) ~~s~~ $x$ \\ & \x1b[31m \u202e")


def _one_cell(text: str) -> str:
    tables = gfm_tables(table(["k", "v"], [["x", escape_text(text)]]))
    assert len(tables) == 1 and len(tables[0]["rows"]) == 1
    return tables[0]["rows"][0][1]


def test_hostile_text_renders_as_itself_in_one_cell():
    html = gfm_html(table(["k", "v"], [["x", escape_text(HOSTILE)]]))
    parsed = parse_html(html)
    # no element came from the answer: only the table's own tags
    assert set(parsed.tags) <= {"table", "thead", "tbody", "tr", "th", "td"}
    cell = parsed.tables[0]["rows"][0][1]
    for piece in ("a|b", "`tick`", "<script>alert(1)</script>", "*bold*", "_em_",
                  "[link](http", "~~s~~", "$x$", "\\", "&"):
        assert piece in cell, piece
    # mentions, issue refs and autolinks are broken by a zero-width joiner
    assert "@" + ZWJ + "someone" in cell and "@someone" not in cell
    assert "#" + ZWJ + "1" in cell and "#" + ZWJ + "34" in cell
    assert "GH-" + ZWJ + "12" in cell
    assert "<a" not in html and "<script" not in html and "<img" not in html
    # control and bidi characters are shown, not obeyed
    assert "\x1b" not in cell and "\\x1b" in cell
    assert "\u202e" not in cell and "\\u202e" in cell


@pytest.mark.parametrize("text", ["|", "||", "\\|", "`", "```", "a\nb", "\r\n|x|\n", "<>", ""])
def test_table_survives_edge_cases(text):
    got = _one_cell(text)
    assert got == text.replace("\r\n", " ⏎ ").replace("\n", " ⏎ ").strip() or got == "–"


def test_input_zero_width_joiner_is_made_visible():
    # a ZWJ in the answer must not be confused with ours
    assert ZWJ not in escape_text("a\u200db")
    assert "\\u200d" in _one_cell("a\u200db")


def test_cap_says_how_much_was_cut():
    assert cap("x" * 100, 10) == "x" * 10 + "… (+90 chars)"
    assert cap("short", 10) == "short"
    # capping happens before escaping, so an escape is never cut in half
    out = escape_text("|" * 50, limit=5)
    assert out.startswith("\\|" * 5) and "(+45 chars)" in out


def test_neutralise_leaves_ordinary_text_alone():
    assert neutralise("residue 4, 794/794 chars; email a@b") == "residue 4, 794/794 chars; email a@" + ZWJ + "b"
    assert neutralise("no refs here") == "no refs here"
    assert "https" + ZWJ + "://" in neutralise("see https://example.com")


def test_code_span_and_fence_cannot_be_closed_from_inside():
    html = gfm_html(table(["c"], [[code("a`b|c")]]))
    assert "<code>a`b|c</code>" in html
    block = fence("```\nrm -rf /\n```", "sh")
    html = gfm_html(block + "\n\nafter")
    assert html.count("<pre") == 1 and "<p>after</p>" in html
