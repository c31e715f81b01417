"""Issue 50 item 3, the markdown report for an issue: what a maintainer needs first stays
open, the effective configuration with the rerun lines, the timing and the provenance fold
into ``<details>`` blocks (as GitHub renders them: cmark-gfm, raw HTML kept), and the
not-ok table has seven columns (eight with several configurations), not twelve."""
from __future__ import annotations

import gzip
import json
import re

from harness.report import render_markdown
from tests.conftest import ROOT

from .gfm import gfm_html, gfm_tables

FIX = ROOT / "tests" / "reports" / "fixtures" / "lab"


def _fixture(name: str) -> tuple[list[dict], list[dict]]:
    with gzip.open(FIX / f"{name}.jsonl.gz", "rt") as fh:
        records = [json.loads(x) for x in fh if x.strip()]
    return records, [json.loads((FIX / f"{name}.manifest.json").read_text())]


def _folded(html: str) -> list[str]:
    """The inner HTML of every <details> block."""
    return re.findall(r"<details>(.*?)</details>", html, re.S)


def test_configuration_reruns_and_provenance_fold_and_the_top_stays_open():
    records, manifests = _fixture("fvp")   # two configurations, one broken cell
    md = render_markdown(records, manifests)
    html = gfm_html(md)
    folded = _folded(html)
    assert len(folded) == 3   # one per configuration, and the provenance
    for block in folded[:2]:
        assert block.startswith("<summary>Effective configuration and rerun commands</summary>")
        assert "<strong>Effective configuration:</strong>" in block and "<pre" in block
    assert folded[2].startswith("<summary>Runs, engine, versions") and "<table>" in folded[2]
    outside = re.sub(r"<details>.*?</details>", "", html, flags=re.S)
    assert "Effective configuration" not in outside and "sweep --engine lab" not in outside
    assert "<h2>Provenance</h2>" in outside and "<h2>Results</h2>" in outside
    # the first lines a maintainer reads: title, notice, headline, results, non-ok cells
    top = md.splitlines()[:35]
    assert any(ln.startswith("| †1") for ln in top), "\n".join(top)


def test_the_not_ok_table_fits_githubs_width():
    for name, columns in (("fvp", 8), ("full128", 7)):
        records, manifests = _fixture(name)
        notes = [t for t in gfm_tables(render_markdown(records, manifests))
                 if t["head"] and t["head"][0] == "†"]
        assert notes and len(notes[0]["head"]) == columns, (name, notes[0]["head"])
