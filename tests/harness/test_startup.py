"""What a ``sweep`` process imports before it needs it: the suite starts a few hundred of
them, and one that stops early (a usage error, ``--help``, ``--version``) must not pay for
the tokenizers, jinja2, /metrics parsing, GitHub posting or vLLM's launch code
(docs/testing.md, "Start-up cost"). Measured by ``benchmarks/startup.py``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# loaded where used: a tokenizer loaded, a template rendered, /metrics parsed, a report
# posted or rendered, a vLLM server launched
LATER = ("pandas", "numpy", "tokenizers", "jinja2", "prometheus_client", "tabulate",
         "harness.publish.gate", "harness.publish.github_rest", "harness.report", "harness.explain",
         "harness.explain.plan",
         "engine.vllm.launch", "engine.vllm.effective", "engine.vllm.bootlog")


def _loaded(code: str) -> list[str]:
    """The modules of ``LATER`` that ``code`` left in ``sys.modules`` (a fresh process)."""
    probe = (f"import sys\n{code}\nprint(__import__('json').dumps(sorted(m for m in "
             f"sys.modules if m in {LATER!r} or m.split('.')[0] in {LATER!r})))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_cli_loads_none_of_what_only_some_runs_use():
    assert _loaded("import harness.command.cli") == []


def test_the_results_api_loads_pandas_only_to_build_a_frame():
    """``harness.results`` / ``harness.publish.compare`` are imported by the CLI's sub-verbs: pandas
    comes with the first frame, not with the import."""
    assert _loaded("import harness.results, harness.publish.compare") == []


def test_a_usage_error_loads_none_of_it_either():
    code = ("from harness.command.cli import main\ntry:\n    main(['--residues', 'nope'])\n"
            "except SystemExit as e:\n    assert e.code == 2, e.code")
    assert _loaded(code) == []


def test_a_report_table_needs_no_pandas():
    code = ("from harness.text.ghmarkdown import table\n"
            "print(table(['a', 'b'], [['x', 'y']]), file=sys.stderr)")
    assert _loaded(code) == ["tabulate"]


def test_a_table_shows_a_missing_or_empty_cell_as_a_dash():
    from harness.text.ghmarkdown import table
    assert table(["a", "b"], [["x"], ["", None], ["794/794", "0001"]]).splitlines() == [
        "| a       | b    |", "|---------|------|", "| x       | –    |", "| –       | –    |",
        "| 794/794 | 0001 |"]
    assert table(["a", "b"], []).splitlines() == ["| a   | b   |", "|-----|-----|"]
