"""The Bug B rule says why as structure (``harness.text.phrase.Phrase``): the report renders it
as markdown, the dry run and the terminal as plain text, from the same parts."""
from __future__ import annotations

from harness.judge.bugb import predict
from harness.text.phrase import Code, Phrase, Text


def _cfg(**kw):
    base = {"engine": "lab", "method": "mtp", "spec": "mtp", "draft_tokens": 3,
            "prefix_caching": True, "prefix_match_unit": 128, "block_size": 128,
            "cudagraph_mode": "FULL_AND_PIECEWISE", "patches": "none", "geometry": "hybrid"}
    return {**base, **kw}


def test_a_phrase_renders_each_part_for_its_reader():
    p = Phrase.of("mode ", Code("FULL|X"), " said ", Text("*bold* <b>"), Phrase.of("."))
    assert p.plain() == "mode FULL|X said *bold* <b>."
    md = p.markdown()
    assert md.startswith("mode `FULL\\|X` said ") and "\\*bold\\*" in md and "<b>" not in md


def test_the_rule_returns_parts_not_markdown():
    pred = predict(_cfg(), 128)
    assert pred.residues == [4]
    assert isinstance(pred.reason, Phrase) and Code("FULL_AND_PIECEWISE") in pred.reason.parts
    assert "`" not in pred.reason.plain() and "`FULL_AND_PIECEWISE`" in pred.why
    off = predict(_cfg(cudagraph_mode="PIECEWISE"), 128)
    assert off.reason.plain() == ("predicts no break: PIECEWISE captures no FULL graph for "
                                  "the verify step")
    assert off.why == ("predicts no break: `PIECEWISE` captures no FULL graph for the "
                       "verify step")
