"""render_markdown / write_report on recorded runs (synthetic records following
docs/records.md, written to JSONL and read back through harness.records.store)."""
from __future__ import annotations

import re

import pytest

from . import synth
from .gfm import gfm_html, gfm_tables, parse_html
from harness.report import (fmt_ranges, miss_probability, miss_sentence, render_markdown,
                            write_report)
from harness.records.store import load_manifest_for, load_records

FULL = synth.make_config()
PIECEWISE = synth.make_config(cudagraph="PIECEWISE")


def _load(path):
    return load_records([path]), [m for m in [load_manifest_for(path)] if m]


@pytest.fixture
def run128(write_run):
    recs = synth.sweep(FULL, range(128), broken=[4])
    return _load(write_run("run128", recs, synth.manifest_for(recs)))


def test_fmt_ranges():
    assert fmt_ranges([0, 1, 2, 3, 5, 6, 7]) == "0–3, 5–7"
    assert fmt_ranges([4]) == "4"
    assert fmt_ranges([1, 2, 9]) == "1, 2, 9"
    assert fmt_ranges(list(range(128))) == "0–127"


@pytest.mark.parametrize("covered,modulus,pct", [(5, 128, "96%"), (3, 128, "98%"),
                                                 (64, 128, "50%"), (127, 128, "0.78%")])
def test_miss_sentence(covered, modulus, pct):
    s = miss_sentence(covered, modulus)
    assert s == (f"{covered} of {modulus} residues sampled: a single "
                 f"broken residue would be missed {pct} of the time.")
    assert miss_probability(128, 128) == 0.0


def test_128_residues_fold_into_one_clean_line(run128):
    records, manifests = run128
    md = render_markdown(records, manifests)
    t = gfm_tables(md)[0]
    assert t["head"][1:] == ["cold", "self-hit"]
    assert t["rows"] == [["residues 0–3, 5–127", "794/794", "794/794"],
                         ["residue 4", "794/794", "empty, stop, 1.00 tok/step †1"]]
    # the bad row and cell are bold; the clean ones are not
    html = gfm_html(md)
    assert "<strong>residue 4</strong>" in html
    assert "<strong>empty, <code>stop</code>, 1.00 tok/step</strong>" in html
    assert "127 clean, 1 broken: residue 4" in md
    assert "**the sweep agrees**: broken exactly at residue 4" in md
    assert "sampled:" not in md  # a full sweep has no miss probability


def test_full_shows_every_residue(run128):
    records, manifests = run128
    t = gfm_tables(render_markdown(records, manifests, full=True))[0]
    assert [r[0] for r in t["rows"]] == [f"residue {i}" for i in range(128)]
    assert t["rows"][4][2].startswith("empty")


def test_every_non_ok_cell_has_its_sha1(run128):
    records, manifests = run128
    md = render_markdown(records, manifests)
    notes = [t for t in gfm_tables(md) if t["head"] and t["head"][0] == "†"][0]
    # seven columns (issue 50): cell = residue and phase, verdict with its finish reason
    assert notes["head"] == ["†", "cell", "verdict", "sha1", "measured", "why",
                             "answer (excerpt)"]
    assert notes["rows"][0][:4] == ["†1", "4 self-hit", "broken, stop", "da39a3ee5e6b"]
    bad = [r for r in records if r.verdict != "ok"]
    for r in bad:
        assert r.sha1[:12] in md


def test_thread_table_full_vs_piecewise(write_run):
    recs = synth.sweep(FULL, [3, 4, 5], broken=[4]) + synth.sweep(PIECEWISE, [3, 4, 5])
    records, _ = _load(write_run("fvp", recs))
    md = render_markdown(records)
    tables = gfm_tables(md)
    main = tables[0]
    assert main["head"] == ["SPEC=mtp CTX=huge k=3 block=128 unit=128 patches=none",
                            "FULL_AND_PIECEWISE cold", "FULL_AND_PIECEWISE self-hit",
                            "PIECEWISE cold", "PIECEWISE self-hit"]
    assert main["rows"][1] == ["residue 4", "794/794", "empty, stop, 1.00 tok/step †1",
                               "794/794", "794/794"]
    thread = tables[1]  # configurations as rows, residues as columns (the thread's shape)
    assert thread["head"][1:] == ["residue 3", "residue 4", "residue 5"]
    assert thread["rows"][0] == ["FULL_AND_PIECEWISE", "794/794", "empty, stop, 1.00 tok/step",
                                 "794/794"]
    assert thread["rows"][1] == ["PIECEWISE", "794/794", "794/794", "794/794"]
    # partial sweep: the miss probability as a sentence, once per configuration
    assert md.count("3 of 128 residues sampled: a single broken residue would be missed "
                    "98% of the time.") == 2
    assert "predicts no break: `PIECEWISE` captures no FULL graph" in md


def test_five_sampled_residues_miss_sentence(write_run):
    recs = synth.sweep(FULL, [8, 12, 16, 32, 124])
    records, manifests = _load(write_run("five", recs, synth.manifest_for(recs)))
    md = render_markdown(records, manifests)
    assert ("5 of 128 residues sampled: a single broken residue would be missed 96% of the "
            "time.") in md
    assert "**not tested**: residue 4 was not sampled" in md


@pytest.mark.parametrize("kw,expect", [
    (dict(answer="", tok_per_step=1.0), "empty, `stop`, 1.00 tok/step"),
    (dict(answer="T", tok_per_step=None), "1 char, `stop`"),
    (dict(answer="Tx", tok_per_step=1.0), "1/2, `stop`, 1.00 tok/step"),
    (dict(answer="The quick brown fox jumps over the lazy ", repeats=1, tok_per_step=None,
          finish_reason="length"), "40/40, `length`"),
])
def test_bad_cell_wording_broken(kw, expect):
    r = synth.record(FULL, 4, "self-hit", verdict="broken", reason="collapsed", **kw)
    md = render_markdown([r])
    assert f"**{expect}**" in md


def test_bad_cell_wording_repetition_and_other_verdicts():
    rep = synth.record(FULL, 8, "self-hit", verdict="broken", answer="the fox " * 60,
                       repeats=12, finish_reason="length", tok_per_step=1.97,
                       reason="degenerate repetition")
    crash = synth.record(FULL, 9, "cold", verdict="crash", answer="", reason="engine died",
                         log_excerpt=["AssertionError: block_size 2048 > unit 128"])
    boot = synth.record(FULL, 10, "cold", verdict="boot-fail", answer="",
                        reason="5.16 GiB KV cache is needed, which is larger than the "
                               "available KV cache memory (4.9 GiB)")
    tmo = synth.record(FULL, 11, "cold", verdict="timeout", answer="", reason="no answer in 600 s")
    inv = synth.record(FULL, 12, "self-hit", verdict="invalid", reason="no cache hit: cached_tokens 0")
    div = synth.record(FULL, 13, "cold", verdict="diverged", answer=synth.PASSAGE[:100] + "X",
                       reason="differs after 100 chars")
    md = render_markdown([rep, crash, boot, tmo, inv, div])
    assert re.search(r"\*\*4/480, repetition ×12, `length`, 1\.97 tok/step\*\*", md)
    assert "**crash**" in md and "**timeout**" in md
    assert ("**boot-fail: 5.16 GiB KV cache is needed, which is larger than the available KV "
            "cache memory (4.9 GiB)**") in md
    assert "**invalid: no cache hit: cached\\_tokens 0**" in md
    assert "**100/101, diverged, `stop`, 3.76 tok/step**" in md
    # the crash's log line goes in the footnote, escaped
    assert "block\\_size 2048 &gt; unit 128" in md
    t = gfm_tables(md)[0]
    assert len(t["rows"]) == 6
    assert "1 boot-fail: residue 10, 1 crash: residue 9, 1 timeout: residue 11, 1 broken: " \
           "residue 8, 1 diverged: residue 13, 1 invalid: residue 12" in md


def test_hostile_answers_end_to_end(write_run):
    hostile = ["a | b | c", "``` code ``` and `tick`", "<script>alert('x')</script>",
               "cc @someone please", "fixes #1 and GH-2", "<!-- x --> <b>bold</b> &amp;"]
    recs = synth.sweep(FULL, range(20))
    for i, text in enumerate(hostile):
        recs.append(synth.record(FULL, 20 + i, "cold", verdict="diverged", answer=text,
                                 reason=f"differs: {text}"))
        recs.append(synth.record(FULL, 20 + i, "self-hit", verdict="broken", answer=text,
                                 reason="collapsed", log_excerpt=[text]))
    records, _ = _load(write_run("hostile", recs))
    for full in (False, True):
        md = render_markdown(records, full=full)
        html = gfm_html(md)
        parsed = parse_html(html)
        allowed = {"h1", "h2", "h3", "p", "ul", "li", "strong", "em", "code", "pre", "table",
                   "thead", "tbody", "tr", "th", "td", "details", "summary"}
        assert set(parsed.tags) <= allowed, set(parsed.tags) - allowed
        assert "<script" not in html and "<b>" not in html and "<!--" not in html
        assert "@someone" not in html and "#1 " not in html and "GH-2" not in html
        assert "@\u200dsomeone" in html and "#\u200d1" in html and "GH-\u200d2" in html
        tables = gfm_tables(md)  # every row has as many cells as its header
        notes = [t for t in tables if t["head"] and t["head"][0] == "†"][0]
        excerpts = [row[-1] for row in notes["rows"]]
        assert "a | b | c" in excerpts
        assert "``` code ``` and `tick`" in excerpts
        assert "<script>alert('x')</script>" in excerpts
        assert "<!-- x --> <b>bold</b> &amp;" in excerpts


def test_identical_failures_share_a_footnote_and_fold():
    log = ["INFO starting", "Traceback (most recent call last):",
           "ValueError: To serve at least one request with the model's max seq len (245760), "
           "5.16 GiB KV cache is needed, which is larger than the available KV cache memory "
           "(4.9 GiB)"]
    recs = [synth.record(FULL, res, ph, verdict="boot-fail", answer="", log_excerpt=log,
                         reason=f"server exited with code 1 during boot (port {4000 + res})")
            for res in range(128) for ph in ("cold", "self-hit")]
    md = render_markdown(recs)
    t = gfm_tables(md)[0]
    # the gist of the log, not the generic reason, and one bold line for 128 residues
    cell = ("boot-fail: ValueError: To serve at least one request with the model's max seq "
            "len (245760), 5.16 GiB … (+80 chars) †1")
    assert t["rows"] == [["residues 0–127", cell, cell]]
    assert "<strong>residues 0–127</strong>" in gfm_html(md)
    notes = [x for x in gfm_tables(md) if x["head"][0] == "†"][0]
    assert len(notes["rows"]) == 1
    assert notes["rows"][0][1] == "0–127 cold, self-hit"
    assert "**nothing measured**" in md
    # --full: every residue, still one footnote
    full = render_markdown(recs, full=True)
    assert len(gfm_tables(full)[0]["rows"]) == 128
    assert len([x for x in gfm_tables(full) if x["head"][0] == "†"][0]["rows"]) == 1


def test_bug_b_at_several_residues_shares_one_footnote():
    dense = synth.make_config(unit=None, block=16, geometry="dense")
    md = render_markdown(synth.sweep(dense, range(128), broken=[4, 20, 36], hit_unit=16))
    t = gfm_tables(md)[0]
    assert [r[0] for r in t["rows"]] == ["residues 0–3, 5–19, 21–35, 37–127", "residues 4, 20, 36"]
    notes = [x for x in gfm_tables(md) if x["head"][0] == "†"][0]
    assert notes["rows"][0][:3] == ["†1", "4, 20, 36 self-hit", "broken, stop"]


def test_excerpts_are_capped():
    r = synth.record(FULL, 4, "self-hit", verdict="diverged", answer="x" * 5000, reason="long")
    md = render_markdown([r])
    assert "x" * 81 not in md and "(+4920 chars)" in md


def test_hit_granularity_note_when_modulus_cannot_resolve():
    hybrid = synth.make_config(unit=None, geometry="hybrid")
    recs = synth.sweep(hybrid, range(128), hit_unit=2048)
    for r in recs:  # hits on 2048-token pages: 22528 or 24576 depending on the length
        if r["phase"] == "self-hit":
            r["cached_tokens"] = 22528 if r["residue"] < 64 else 24576
            r["computed_tail"] = r["prompt_tokens"] - r["cached_tokens"]
    md = render_markdown(recs)
    assert "are all multiples of 2048 (their gcd)" in md
    assert "which a mod-128 sweep cannot resolve" in md
    # no unit: the rule cannot name a residue; with unit 128 no such note
    assert "cannot name a residue" in md
    assert "their gcd" not in render_markdown(synth.sweep(FULL, range(128)))


def test_ladder_block_and_match_unit(write_run):
    recs = []
    for block, unit in ((16, None), (128, None), (16, 128), (128, 128)):
        c = synth.make_config(block=block, unit=unit)
        recs += synth.sweep(c, range(128), broken=[4] if unit else [],
                            hit_unit=unit or 2048)
    records, _ = _load(write_run("ladder", recs))
    md = render_markdown(records)
    assert "## Ladder: block × unit" in md
    ladder = [t for t in gfm_tables(md) if t["head"][:2] == ["block", "unit"]][0]
    assert ladder["rows"] == [
        ["16", "none", "128/128", "clean", "no residue mod 128 (hit unit unknown)"],
        ["16", "128", "128/128", "broken at residue 4", "broken at residue 4"],
        ["128", "none", "128/128", "clean", "no residue mod 128 (hit unit unknown)"],
        ["128", "128", "128/128", "broken at residue 4", "broken at residue 4"],
    ]
    # four configurations as columns; clean rows still fold
    main = gfm_tables(md)[0]
    assert len(main["head"]) == 1 + 4 * 2
    assert main["rows"][0][0] == "residues 0–3, 5–127"


def test_dense_model_without_unit_hits_in_blocks():
    dense = synth.make_config(unit=None, block=16, geometry="dense")
    md = render_markdown(synth.sweep(dense, range(128), broken=[4, 20, 36, 52, 68, 84, 100, 116],
                                     hit_unit=16))
    assert "predicts residues 4, 20, 36, 52, 68, 84, 100, 116 (k + 1 = 4, mod block size" in md
    assert "**the sweep agrees**: broken exactly at residues 4, 20, 36, 52, 68, 84, 100, 116" in md


def test_cells_not_run_do_not_make_a_row_bad():
    a = synth.sweep(FULL, range(20))
    b = synth.sweep(PIECEWISE, range(10))
    md = render_markdown(a + b)
    rows = gfm_tables(md)[0]["rows"]
    assert rows[1][0] == "residues 10–19" and rows[1][-1] == "not run"
    assert "<strong>residues 10–19</strong>" not in gfm_html(md)
    assert "all ok" in md


def test_no_ladder_when_many_dimensions_differ():
    a = synth.sweep(FULL, [1])
    b = synth.sweep(synth.make_config(spec="dflash2", k=7, cudagraph="PIECEWISE", block=16,
                                      unit=None), [1])
    assert "## Ladder" not in render_markdown(a + b)


def test_provenance_and_rerun(run128):
    records, manifests = run128
    md = render_markdown(records, manifests)
    prov = md[md.index("## Provenance"):]
    for needle in ("`20261130-004512-ab12`", "lab lab-0.1.0", "lab-tiny-copy", "cpu0",
                   "ci-runner-1", "fresh", "`0.1.0+gc16d594`", "2026-11-30T00:45:12+00:00",
                   "sweep --spec mtp --ctx huge --residues all"):
        assert needle in prov, needle
    assert "prefill-discriminator: off" in md
    assert "**Effective configuration:** `engine=lab" in md
    assert "prefix_match_unit=128" in md
    assert "sweep --spec mtp --ctx huge --residues 4 --cudagraph FULL_AND_PIECEWISE" in md
    html = gfm_html(md)
    assert html.count("<pre") == 1  # the rerun block


def test_config_mismatch_and_fix_reported():
    fixed = synth.make_config(patches="all")
    requested = dict(fixed, cudagraph_mode="FULL")
    recs = synth.sweep(fixed, [3, 4, 5], mismatch=["cudagraph_mode"], requested=requested)
    md = render_markdown(recs)
    assert "**Config mismatch:** cudagraph\\_mode: asked FULL, got FULL\\_AND\\_PIECEWISE" in md
    assert "predicts no break: the prefill-discriminator fix is on" in md
    assert "**the sweep agrees** (no break)" in md


def test_unmeasured_points_do_not_count_as_agreement():
    boot = [synth.record(FULL, 4, ph, verdict="boot-fail", answer="", reason="KV cache too small")
            for ph in ("cold", "self-hit")]
    assert "**nothing measured**" in render_markdown(boot)
    md = render_markdown(boot + synth.sweep(FULL, [3, 5]))
    assert "**not tested**: residue 4 was swept but produced no answer" in md


def test_a_residue_whose_self_hit_is_invalid_is_not_clean():
    """Issue 33 item 2: every self-hit invalid (no hit proven), every cold ok. The rule's
    residue 4 was not measured where Bug B breaks: neither clean nor a disagreement."""
    recs = [synth.record(FULL, res, "cold") for res in (3, 4, 5)] + [
        synth.record(FULL, res, "self-hit", verdict="invalid",
                     reason="hit not proven: the server reports no cached tokens")
        for res in (3, 4, 5)]
    md = render_markdown(recs)
    assert "disagrees" not in md and "is clean" not in md
    assert "**no residue judged on every phase**" in md
    # beside measured residues, the rule's residue is named untested
    md = render_markdown(recs + synth.sweep(FULL, [6, 7]))
    assert "disagrees" not in md
    assert "**not tested**: residue 4 was swept but not judged on every phase" in md


def test_a_diverged_self_hit_is_not_called_broken_in_the_summary():
    """Issue 33 item 9 (the H200's four configurations): cold broken, self-hit diverged:
    the result line names each verdict's phases, never "broken on: cold, self-hit"."""
    recs = [synth.collapse(FULL, 4, "cold"),
            synth.record(FULL, 4, "self-hit", verdict="diverged", answer="The quick brown",
                         reason="differs from the reference at char 3")]
    md = render_markdown(recs + synth.sweep(FULL, [3, 5]))
    assert "(broken on: cold; diverged on: self-hit)" in md
    assert "broken on: cold, self-hit" not in md


def test_the_rule_names_no_residue_under_load_mode_cancel():
    """Issue 33 item 6: cancel mode cuts the backgrounds, so the decode rows beside a
    measured prefill vary; the rule said "predicts residues  (" (an empty list) and then
    "the sweep agrees". It names no residue ahead, and a record without a logged batch is
    not checked."""
    recs = [{**r, "load": {"n": 2, "mode": "cancel", "restarts": 2}}
            for r in synth.sweep(FULL, [3, 4, 5])]
    md = render_markdown(recs)
    (line,) = [ln for ln in md.splitlines() if ln.startswith("- **Bug B rule:**")]
    assert "names no residue ahead under `--load 2 --load-mode cancel`" in line
    assert "predicts residues  (" not in md
    assert "residues 3–5: no batch logged, not checked" in line


def _beside(final_chunk: int, decode_reqs: int) -> dict:
    reqs = decode_reqs + 1
    return {"final_chunk": final_chunk, "batch_reqs": reqs, "decode_reqs": decode_reqs,
            "batch_tokens": final_chunk + 4 * decode_reqs, "prefill_reqs": 1}


@pytest.mark.parametrize("shaped_at,broken,agrees", [
    (4, [4], "**the sweep agrees**: broken exactly where `load.beside` shows a 4-token "
             "final chunk in a uniform batch: residue 4"),
    (None, [], "**the sweep agrees**: no break, and no request ran the shape"),
    (None, [4], "**the sweep disagrees**: broken at residue 4, where `load.beside` shows "
                "a 4-token final chunk in a uniform batch: none"),
    (5, [], "**the sweep disagrees**: broken at no residue, where `load.beside` shows a "
            "4-token final chunk in a uniform batch: residue 5")])
def test_under_load_mode_cancel_each_break_is_checked_against_its_batch(shaped_at, broken,
                                                                          agrees):
    """Under cancel mode the rule predicts per measured request: a break where the
    record's load.beside shows a 1 + k-token final chunk in a batch of 1 + k-token rows."""
    recs = []
    for r in synth.sweep(FULL, [3, 4, 5], broken=broken):
        beside = _beside(4, 2) if r["residue"] == shaped_at else _beside(68, 2)
        recs.append({**r, "load": {"n": 2, "mode": "cancel", "restarts": 2,
                                   "beside": beside}})
    (line,) = [ln for ln in render_markdown(recs).splitlines()
               if ln.startswith("- **Bug B rule:**")]
    assert agrees in line, line


def test_a_load_whose_backgrounds_ended_says_so_and_is_not_proven():
    """load.ended (steady backgrounds that ran out before they were cut) is in the load
    column, and such a cell is not called proven."""
    recs = [{**r, "load": {"n": 4, "mode": "steady", "running_before": 4, "running_after": 0,
                           "ended": 4, "proven": False,
                           "beside": {**_beside(100, 0), "dispatch": "PIECEWISE"}}}
            for r in synth.sweep(FULL, [4])]
    md = render_markdown(recs)
    assert ("4 steady: chunk 100 beside 0 decode, 0 prefill (100 tokens, `PIECEWISE`), "
            "4 background(s) ended before it returned, **not proven beside decode steps**") in md


def test_long_boot_fail_reason_is_capped_in_the_cell_not_the_footnote():
    reason = "server exited with code 1 during boot: " + "x" * 200
    r = synth.record(FULL, 4, "cold", verdict="boot-fail", answer="", reason=reason)
    md = render_markdown([r])
    assert "(+149 chars)**" in md and "(+119 chars)" in md


def test_config_mismatch_as_sentences():
    recs = synth.sweep(FULL, [3], mismatch=["max_model_len: requested 245760, server runs 1048576"])
    assert ("**Config mismatch:** max\\_model\\_len: requested 245760, server runs 1048576\n"
            in render_markdown(recs))


def test_disagreement_is_said():
    recs = synth.sweep(FULL, range(128), broken=[9])
    md = render_markdown(recs)
    assert "**the sweep disagrees**: broken at residue 9, the rule predicts residue 4" in md


def test_interrupted_manifest_and_missing_points(write_run):
    recs = synth.sweep(FULL, range(10))
    m = synth.manifest_for(recs, residues=list(range(128)), interrupted=True)
    records, manifests = _load(write_run("cut", recs, m))
    md = render_markdown(records, manifests)
    assert "**Missing:** planned but not on disk: residues 10–127" in md
    assert "did not finish" in md


def test_latest_record_wins_across_runs():
    old = synth.sweep(FULL, [4], broken=[4], run_id="r1", started_at="2026-11-29T00:00:00+00:00")
    new = synth.sweep(FULL, [4], run_id="r2", started_at="2026-11-30T00:00:00+00:00")
    md = render_markdown(old + new)
    assert "all ok" in md and "2 older record(s)" in md


def test_empty_and_write_report(tmp_path, run128):
    assert "No records" in render_markdown([])
    records, manifests = run128
    p = write_report(records, manifests, tmp_path / "deep" / "r.md")
    assert p.read_text(encoding="utf-8") == render_markdown(records, manifests)


def test_sparse_records_do_not_crash_anything(tmp_path):
    """Records from an older harness or another tool may lack keys: nothing may crash."""
    from harness.publish.compare import compare_records, render_compare_markdown
    from harness.publish.gate import gate_exit_code, write_junit

    sparse = [{"config_id": "c1", "residue": 4, "phase": "self-hit", "verdict": "broken"},
              {"config_id": "c1", "residue": 3, "phase": "self-hit", "verdict": "ok"},
              {"config_id": "c2", "residue": 4, "phase": "cold", "verdict": "crash",
               "log_excerpt": ["Segmentation fault"], "config": None, "answer": None}]
    md = render_markdown(sparse)
    assert gfm_tables(md) and "**crash**" in md
    assert gate_exit_code(sparse) == 1
    render_compare_markdown(compare_records(sparse, sparse))
    write_junit(sparse, tmp_path / "j.xml")


def test_bad_everywhere_is_inconclusive_not_agreement():
    # a model that gets the document wrong at every residue: residue 4 is bad too, but
    # that is no evidence for the Bug B rule
    cfg = synth.make_config()
    recs = synth.sweep(cfg, range(128), broken=range(128))
    md = render_markdown(recs, [synth.manifest_for(recs)])
    assert "**inconclusive**: 128 of 128 measured residues are bad" in md
    assert "the sweep agrees" not in md


def test_the_corner_names_what_the_server_ran_and_what_was_asked():
    # vLLM runs the tiny hybrid's attention with block 256 when 128 is asked: the title and
    # the table's corner show the server's value and the asked one; labels keep the asked.
    recs = []
    for mode in ("FULL_AND_PIECEWISE", "PIECEWISE"):
        asked = synth.make_config(cudagraph=mode, block=128)
        ran = dict(asked, block_size=256)
        recs += synth.sweep(ran, range(4), requested=asked, mismatch=("block_size",))
    md = render_markdown(recs, [])
    assert md.splitlines()[0].startswith("# Residue sweep: `") and "block=256 (asked 128)" in \
        md.splitlines()[0]
