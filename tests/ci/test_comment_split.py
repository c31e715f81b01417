"""A report over GitHub's 65,536-character comment limit posts as several comments, the
non-ok cells first, split between table rows with every continued table under its header,
and rendered by GitHub's own cmark-gfm as the same tables. Later pushes update the parts in
place, and a report that fits again leaves one comment."""
from __future__ import annotations

import pytest

from harness.publish import comment_split as cs, github_rest as gr
from harness import report as report_mod
from tests.reports import synth
from tests.reports.gfm import gfm_tables

from .fake_github import API, FakeGitHub

LIMIT = cs.COMMENT_LIMIT


@pytest.fixture(scope="module")
def long_report() -> str:
    """A real report (harness.report) of 8 configurations x 128 residues, one residue in
    four diverged on the hit with its own answer: 256 non-ok cells, full tables."""
    recs = []
    for k in range(1, 9):
        cfg = synth.make_config(k=k, patches="none")
        for res in range(128):
            recs.append(synth.record(cfg, res, "cold"))
            if res % 4 == k % 4:
                recs.append(synth.record(
                    cfg, res, "self-hit", verdict="diverged",
                    answer=synth.PASSAGE[:300] + f" then k={k} residue {res} went its own way",
                    reason="differs from the reference at char 300"))
            else:
                recs.append(synth.record(cfg, res, "self-hit"))
    md = report_mod.render_markdown(recs, [synth.manifest_for(recs)], full=True)
    assert len(md) > 3 * LIMIT
    return md


def _nonok_rows(markdown: str) -> list[str]:
    """The rows of the report's non-ok table (its lines after the 'Non-ok cells' lead)."""
    lines = markdown.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("Non-ok cells"))
    table = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table[2:]


def _post(gh, md):
    return gr.post_report(md, gr.Target(gh.repo, 7, "pr"), token="tok", api_url=API,
                          transport=gh.transport())


def test_long_report_posts_as_several_comments_bad_cells_first(long_report):
    gh = FakeGitHub()
    _post(gh, long_report)
    parts = [c["body"] for c in gh.on(7)]
    n = len(parts)
    assert n >= 4 and all(len(p) <= LIMIT for p in parts)
    assert [p.splitlines()[0] for p in parts] == [
        f"<!-- residue-lab:sweep-report part {i}/{n} -->" for i in range(1, n + 1)]

    # In the report as rendered the non-ok cells come after the first 65,536 characters:
    # a plain cut would not show them first.
    rows = _nonok_rows(long_report)
    assert len(rows) == 256 and long_report.index(rows[0]) > LIMIT

    # Part 1: the title, the headline, then the non-ok cells under their heading.
    first = parts[0]
    assert first.index("# Residue sweep: 8 configurations") < first.index("256 points not ok") \
        < first.index("\n## Non-ok cells\n") < first.index(rows[0])
    assert "## Results" not in first
    # Every non-ok row, intact, before any other table of the report.
    joined = "\n".join(parts)
    for row in rows:
        assert row + "\n" in joined
    results_header = next(x for x in long_report.splitlines() if x.startswith("| `SPEC="))
    assert joined.index(rows[-1]) < joined.index(results_header)


def test_tables_split_between_rows_with_the_header_repeated(long_report):
    parts = cs.comment_bodies(long_report, "sweep-report")
    original_rows = {x for x in long_report.splitlines() if x.startswith("|")}
    headers = {}
    for block in cs.parse_blocks(long_report):
        if block.kind == "table":
            headers[block.lines[0]] = block.lines[1]
    for p in parts:
        for block in cs.parse_blocks(p):
            if block.kind != "table":
                continue
            # a table in a part opens with one of the report's own header + delimiter rows
            assert headers.get(block.lines[0]) == block.lines[1], block.lines[0][:80]
            assert set(block.lines) <= original_rows   # no row cut or invented
        for t in gfm_tables(p):                        # GitHub renders each as a table
            assert t["head"] and t["rows"]
    # and every row of the report is somewhere
    assert original_rows <= {x for p in parts for x in p.splitlines()}


def test_code_blocks_are_refenced_and_nothing_is_lost(long_report):
    parts = cs.comment_bodies(long_report, "m")
    for p in parts:
        fences = [x for x in p.splitlines() if x.startswith("```")]
        assert len(fences) % 2 == 0
    kept = {x for p in parts for x in p.splitlines()}
    lost = [x for x in long_report.splitlines() if x.strip() and x not in kept]
    assert lost == []


def test_next_pushes_update_the_parts_and_a_short_report_leaves_one_comment(long_report):
    gh = FakeGitHub()
    gh.add(7, "LGTM")
    _post(gh, long_report)
    ids = [c["id"] for c in gh.on(7)][1:]
    gh.requests.clear()
    _post(gh, long_report.replace("# Residue sweep: 8 configurations", "# Residue sweep: pushed again"))
    assert [c["id"] for c in gh.on(7)][1:] == ids            # same comments, edited
    assert {m for m, _ in gh.requests} == {"GET", "PATCH"}
    assert "# Residue sweep: pushed again" in gh.on(7)[1]["body"]

    short = open(f"{gr.__file__.rsplit('/harness/', 1)[0]}/reports/full128.md").read()
    gh.requests.clear()
    _post(gh, short)
    left = gh.on(7)
    assert [c["body"] for c in left] == ["LGTM", "<!-- residue-lab:sweep-report -->\n" + short]
    assert left[1]["id"] == ids[0]                            # part 1 became the report
    assert [m for m, _ in gh.requests].count("DELETE") == len(ids) - 1


def test_a_report_that_fits_is_posted_as_it_is():
    md = "# t\n\n" + "| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 100
    assert cs.comment_bodies(md, "m") == ["<!-- residue-lab:m -->\n" + md]


def test_the_non_ok_part_can_be_a_section_of_its_own():
    """A report whose non-ok cells have their own heading: that whole section goes first."""
    rows = "".join(f"| {i} | {'x' * 200} |\n" for i in range(400))
    md = ("# Sweep\n\nheadline\n\n## Results\n\n| r | v |\n|---|---|\n" + rows
          + "\n## Not-ok cells\n\n| r | why |\n|---|---|\n| 4 | **empty** |\n\n## Provenance\n\nx\n")
    parts = cs.comment_bodies(md, "m")
    assert len(parts) == 2
    assert parts[0].index("## Not-ok cells") < parts[0].index("| 4 | **empty** |") \
        < parts[0].index("## Results")
    assert "## Non-ok cells" not in parts[0]                  # its own heading is kept
