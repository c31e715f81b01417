"""action.yml and the example workflows pass actionlint and GitHub's JSON schemas
(check-jsonschema's vendored ``github-actions`` / ``github-workflows``), and the
validators really catch what they are here for (a misspelled input, a bad key)."""
from __future__ import annotations

import subprocess

import pytest

from .tools import require_tool
from .workflows import ACTION, EXAMPLES, scratch_project


def _run(argv: list[str], cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_there_are_example_workflows():
    assert {p.name for p in EXAMPLES} >= {"residue-sweep-lab.yml", "residue-sweep-gpu.yml"}


def test_action_matches_githubs_action_schema():
    exe = require_tool("check-jsonschema")
    proc = _run([exe, "--builtin-schema", "vendor.github-actions", str(ACTION)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("workflow", EXAMPLES, ids=lambda p: p.name)
def test_example_matches_githubs_workflow_schema(workflow):
    exe = require_tool("check-jsonschema")
    proc = _run([exe, "--builtin-schema", "vendor.github-workflows", str(workflow)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_rejects_a_bad_action(tmp_path):
    exe = require_tool("check-jsonschema")
    bad = tmp_path / "action.yml"
    bad.write_text(ACTION.read_text().replace("using: composite", "using: compost"))
    assert _run([exe, "--builtin-schema", "vendor.github-actions", str(bad)]).returncode != 0


def test_actionlint_passes_examples_and_action_steps(tmp_path):
    exe = require_tool("actionlint")
    project = scratch_project(tmp_path / "repo")
    proc = _run([exe, "-no-color"], cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checked = sorted(p.name for p in (project / ".github" / "workflows").iterdir())
    assert checked == sorted([p.name for p in EXAMPLES] + ["action-steps.yml"])


def test_actionlint_catches_a_misspelled_action_input(tmp_path):
    exe = require_tool("actionlint")
    project = scratch_project(tmp_path / "repo")
    wf = project / ".github" / "workflows" / "residue-sweep-lab.yml"
    wf.write_text(wf.read_text().replace("residues: all", "residue: all"))
    proc = _run([exe, "-no-color"], cwd=project)
    assert proc.returncode != 0
    assert 'input "residue" is not defined' in proc.stdout


@pytest.mark.parametrize("workflow", EXAMPLES, ids=lambda p: p.name)
def test_docs_show_the_validated_workflow_verbatim(workflow):
    """docs/ci.md's workflows are the example files, so what is validated is what is shown."""
    doc = (ACTION.parent / "docs" / "ci.md").read_text(encoding="utf-8")
    assert "```yaml\n" + workflow.read_text(encoding="utf-8") + "```" in doc
