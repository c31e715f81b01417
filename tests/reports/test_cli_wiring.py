"""The report library through the real command line (``python -m harness report|compare``)
on a run recorded by the real harness: what the CLI passes must reach the library."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from . import synth
from .conftest import FIXTURES
from harness.report import render_markdown
from harness.records.store import load_manifest_for, load_records
from .test_gate import _fake_gh

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def recorded(tmp_path):
    for ext in (".jsonl", ".manifest.json"):
        shutil.copy(FIXTURES / "cmd" / f"fake-break4{ext}", tmp_path / f"fake-break4{ext}")
    return tmp_path / "fake-break4.jsonl"


@pytest.mark.slow
def test_sweep_report_matches_the_library(recorded, tmp_path, cli):
    expected = render_markdown(load_records([recorded]), [load_manifest_for(recorded)])
    proc = cli("report", recorded)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip("\n") == expected.rstrip("\n")
    out = tmp_path / "r.md"
    assert cli("report", recorded, "-o", out, "--full").returncode == 0
    assert out.read_text() == render_markdown(load_records([recorded]),
                                              [load_manifest_for(recorded)], full=True)


@pytest.mark.slow
def test_archived_gzip_records_report_the_same(recorded, tmp_path, cli):
    """Archived runs (reports/h200/results/*.jsonl.gz) are read by path and by run id, with
    their manifest, and give the same report as the plain file."""
    import gzip
    arch = tmp_path / "arch"
    arch.mkdir()
    gz = arch / "fake-break4.jsonl.gz"
    gz.write_bytes(gzip.compress(recorded.read_bytes()))
    shutil.copy(recorded.with_name("fake-break4.manifest.json"), arch)
    assert load_manifest_for(gz) == load_manifest_for(recorded) is not None
    plain = cli("report", recorded)
    by_path = cli("report", gz)
    by_id = cli("report", "fake-break4", "--out", arch)
    assert plain.returncode == by_path.returncode == by_id.returncode == 0, by_id.stderr
    assert plain.stdout == by_path.stdout == by_id.stdout


@pytest.mark.slow
def test_sweep_compare_json_and_exit_code(recorded, tmp_path, cli):
    clean = [r.replaced(verdict="ok", answer="x", run_id="clean").as_dict()
             for r in load_records([recorded])]
    base = synth.write_jsonl(tmp_path / "clean.jsonl", clean)
    proc = cli("compare", base, recorded, "--json")
    res = json.loads(proc.stdout)
    assert res["regressed"] == 2 and {r["residue"] for r in res["regressions"]} == {4}
    assert proc.returncode == 1
    proc = cli("compare", recorded, base)
    assert proc.returncode == 0 and "fixed: residue 4" in proc.stdout


@pytest.mark.slow
def test_sweep_report_posts_through_gh(recorded, tmp_path, cli):
    bindir, log = _fake_gh(tmp_path)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "r.md"
    proc = cli("report", recorded, "-o", out, "--gh-issue", "4", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(log.read_text()) == ["issue", "comment", "4", "--body-file", str(out)]


@pytest.mark.slow
def test_hostile_answers_through_a_real_sweep(tmp_path, cli):
    """A server whose every answer is hostile, swept by the real CLI: the report it writes
    renders (cmark-gfm) with intact tables, no injected tags, no live mentions or
    references; the JUnit XML it writes parses."""
    import junitparser

    from .gfm import gfm_html, gfm_tables, parse_html
    from .hostile_engine import HOSTILE

    tok = FIXTURES.parents[1] / "fixtures" / "tokenizer"
    server = (f"{sys.executable} {Path(__file__).parent / 'hostile_engine.py'} "
              f"--port {{port}} --model {tok}")
    proc = cli.sweep("--engine", "cmd", "--model", tok, "--server-cmd", server, "--context", 800,
                     "--residues", "3,4", "--junit", tmp_path / "junit.xml", timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (report,) = (tmp_path / "reports").glob("*.md")
    md = report.read_text()
    html = gfm_html(md)
    tags = set(parse_html(html).tags)
    assert tags <= {"h1", "h2", "h3", "p", "ul", "li", "strong", "em", "code", "pre", "table",
                    "thead", "tbody", "tr", "th", "td", "details", "summary"}, tags
    assert "<script" not in html and "<b>" not in html and "<a " not in html
    assert "@someone" not in html and "#1 " not in html and "GH-2" not in html
    notes = [t for t in gfm_tables(md) if t["head"][0] == "†"][0]
    excerpt = notes["rows"][0][-1]
    assert excerpt.startswith("| a | b | `tick` ```fence``` <script>alert('x')</script>")
    assert "⏎ next line" in excerpt or "(+" in excerpt
    xml = junitparser.JUnitXml.fromfile(str(tmp_path / "junit.xml"))
    cases = [c for s in xml for c in s]
    assert len(cases) == 4 and all(c.result for c in cases)
    assert all("<script>" in c.result[0].message for c in cases)
    try:
        import xmlschema
    except ImportError:
        pass
    else:
        xmlschema.XMLSchema(str(FIXTURES / "junit.xsd")).validate(str(tmp_path / "junit.xml"))
    assert HOSTILE.startswith("| a |")
