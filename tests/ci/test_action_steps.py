"""The action's steps, run for real: action.yml parsed, every ``run:`` step executed with
bash in order with the environment GitHub gives it, against the lab engine with three
residues (3, 4 = k + 1, 5) on the configuration that breaks residue 4 without the fix.

The install step really pip-installs the action's checkout (a copy of this repository's
files) into a fresh virtual environment, and every later step uses that install, not this
checkout. The ``uses:`` steps are checked for inputs that point at files that exist; the
comment step runs in dry mode. Asserted: the comment body, the step summary and the JUnit
the action promises, and the gate's exit code with and without a baseline.
"""
from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import junitparser
import pytest

from .action_runner import ActionRun, clean_env
from .workflows import ROOT, load_action

# Each test runs the Action's steps, the first one pip-installing the checkout.
pytestmark = pytest.mark.slow

MARKER = "sweep-lab"
EXTRA = "--cudagraph FULL_AND_PIECEWISE --patches none --context 1024 --slots 2"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(action checkout, venv bin): the action's files as a checkout, and a virtual
    environment whose only way to the harness is what the install step will put there
    (this interpreter's packages are visible through a .pth, so pip finds the
    dependencies installed and fetches nothing but the build backend)."""
    base = tmp_path_factory.mktemp("action")
    checkout = base / "residue-lab"
    checkout.mkdir()
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            dst = checkout / name.decode()
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
            dst.chmod(src.stat().st_mode)
    venv = base / "venv"
    # No pip of its own (ensurepip costs more than the test): pip, like every dependency,
    # comes from this interpreter's packages through the .pth, and installs into the venv.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=240)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return checkout, venv / "bin"


def _install_once(installed) -> None:
    """For the tests after the first: the install step's own command, unless an earlier
    test on this worker already ran it (the first test runs it as the action's step)."""
    checkout, venv_bin = installed
    if not (venv_bin / "sweep").exists():
        subprocess.run([str(venv_bin / "python"), "-m", "pip", "install", "-q", str(checkout)],
                       check=True, timeout=600, env=clean_env(), capture_output=True)


def _run_action(installed, tmp_path, github=None, **inputs) -> ActionRun:
    checkout, venv_bin = installed
    if inputs.get("install") == "false":
        _install_once(installed)
    workspace = tmp_path / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    temp = tmp_path / "runner-temp"
    temp.mkdir(parents=True, exist_ok=True)
    env = clean_env(PATH=f"{venv_bin}:{clean_env()['PATH']}")
    seen: dict[str, dict] = {}

    def setup_python(with_):
        assert with_ == {"python-version": "3.11"}
        seen["setup-python"] = with_

    def upload_artifact(with_):
        assert with_["name"] == "residue-sweep"
        for p in filter(str.strip, with_["path"].splitlines()):
            assert Path(p).exists(), f"upload-artifact path {p} does not exist"
        seen["upload-artifact"] = with_

    def junit_report(with_):
        assert Path(with_["report_paths"]).is_file()
        assert with_["annotate_only"] == "false" and with_["fail_on_failure"] == "false"
        assert with_["check_name"] == f"residue sweep ({MARKER})"
        seen["junit"] = with_

    run = ActionRun(load_action(), action_path=checkout, workspace=workspace, runner_temp=temp,
                    inputs={"engine": "lab", "spec": "mtp", "ctx": "huge", "residues": "3,4,5",
                            "extra-args": EXTRA, "comment": "dry-run",
                            "comment-marker": MARKER, **inputs},
                    github=github or {"repository": "octo/lab", "token": "",
                                      "event_name": "pull_request",
                                      "event": {"pull_request": {"number": 7}}},
                    env=env,
                    checkers={"actions/setup-python": setup_python,
                              "actions/upload-artifact": upload_artifact,
                              "mikepenz/action-junit-report": junit_report})
    run.run()
    run.seen = seen
    return run


def _step(run: ActionRun, prefix: str):
    return next(r for r in run.results if r.name.startswith(prefix))


def _dry_run_bodies(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    return [json.loads(lines[i + 1])["body"] for i, x in enumerate(lines)
            if x.startswith("POST https://api.github.com/repos/octo/lab/issues/7/comments")]


def test_action_sweeps_the_lab_and_delivers_comment_summary_and_junit(installed, tmp_path):
    run = _run_action(installed, tmp_path)
    names = [(r.name, r.ran, r.rc) for r in run.results]
    install, sweep = _step(run, "Install"), _step(run, "Sweep")
    assert install.ran and install.rc == 0, install.stdout[-2000:] + install.stderr[-2000:]
    assert sweep.rc == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    out = sweep.outputs
    assert out["exit-code"] == "1", names          # residue 4 is broken without the fix
    report = Path(out["report"]).read_text(encoding="utf-8")
    # the harness that ran is the installed one
    where = subprocess.run(
        [str(installed[1] / "python"), "-c", "import harness; print(harness.__file__)"],
        cwd=tmp_path / "workspace", capture_output=True, text=True, env=clean_env()).stdout
    assert where.startswith(str(installed[1].parent / "lib")), where

    # Records and report: three residues x two phases, residue 4's hit broken.
    records = [json.loads(x) for x in Path(out["results"]).read_text().splitlines()]
    assert sorted((r["residue"], r["phase"]) for r in records) == [
        (res, ph) for res in (3, 4, 5) for ph in ("cold", "self-hit")]
    assert {(r["residue"], r["phase"]) for r in records if r["verdict"] != "ok"} == {(4, "self-hit")}

    # The step summary is the report.
    assert run.summary.read_text(encoding="utf-8") == report
    assert "**residue 4**" in report and "3 data points, 6 phase cells" in report

    # The JUnit: one testcase per point x phase, the broken cell a failure of type broken.
    xml = junitparser.JUnitXml.fromfile(out["junit"])
    cases = [c for suite in xml for c in suite]
    assert len(cases) == 6
    failed = [c for c in cases if not c.is_passed]
    assert [c.name.rsplit(" ", 3)[-3:] for c in failed] == [["residue", "4", "self-hit"]]
    assert failed[0].result[0].type == "broken"
    assert set(run.seen) == {"setup-python", "upload-artifact", "junit"}
    # The artifact: records, manifest, report, JUnit, and the servers' logs.
    *files, logs = [Path(p) for p in run.seen["upload-artifact"]["path"].splitlines()]
    assert [p.suffix for p in files] == [".jsonl", ".json", ".md", ".xml"]
    assert [p.name for p in files[2:]] == [f"{out['run-id']}.md", "junit.xml"]
    assert logs.is_dir() and len(list(logs.glob("*.log"))) == 3

    # The comment: one body, the marker then the report, for pull request 7.
    comment = _step(run, "Comment")
    assert comment.ran and comment.rc == 0, comment.stderr
    assert "dry run, nothing sent: 1 comment part(s) for pull request octo/lab#7" in comment.stdout
    assert _dry_run_bodies(comment.stdout) == [f"<!-- residue-lab:{MARKER} -->\n" + report]

    # The gate fails the job with the sweep's exit code.
    gate = _step(run, "Gate")
    assert gate.ran and gate.rc == 1 and "::error::sweep exited 1" in gate.stdout
    assert run.failed


def test_with_a_baseline_a_known_broken_cell_does_not_fail_the_gate(installed, tmp_path):
    first = _run_action(installed, tmp_path / "first", install="false")
    baseline = _step(first, "Sweep").outputs["results"]
    run = _run_action(installed, tmp_path / "second", baseline=baseline, install="false")
    sweep = _step(run, "Sweep")
    assert sweep.outputs["exit-code"] == "0", sweep.stdout[-3000:] + sweep.stderr[-3000:]
    gate = _step(run, "Gate")
    assert gate.rc == 0 and "sweep passed" in gate.stdout and not run.failed
    # the JUnit still shows the broken cell (the JUnit publisher does not gate)
    xml = junitparser.JUnitXml.fromfile(sweep.outputs["junit"])
    assert sum(1 for s in xml for c in s if not c.is_passed) == 1


def test_the_baseline_input_takes_a_run_id_under_out_dir(installed, tmp_path):
    """Issue 36: action.yml documents "or run id under out-dir", but sweep.sh gave sweep a
    fresh --out, where no earlier run is. A run id now finds its records under out-dir
    (the same workspace, as a self-hosted runner keeps it), and the comment names what
    the gate decided; an unknown id is one line before anything runs."""
    first = _run_action(installed, tmp_path, install="false")
    run_id = _step(first, "Sweep").outputs["run-id"]
    run = _run_action(installed, tmp_path, baseline=run_id, install="false")
    sweep = _step(run, "Sweep")
    assert sweep.outputs["exit-code"] == "0", sweep.stdout[-3000:] + sweep.stderr[-3000:]
    assert f"--baseline {_step(first, 'Sweep').outputs['results']}" in sweep.stdout
    body = _dry_run_bodies(_step(run, "Comment").stdout)[0]
    assert "## Baseline" in body and "Gate **passed**" in body and run_id in body
    bad = _run_action(installed, tmp_path, baseline="20990101-000000-dead", install="false")
    sweep = _step(bad, "Sweep")
    assert sweep.rc == 2 and "no run 20990101-000000-dead under out-dir" in sweep.stderr
    assert bad.failed


def test_a_push_without_a_pull_request_sweeps_and_comments_nothing(installed, tmp_path):
    run = _run_action(installed, tmp_path, github={"repository": "octo/lab", "token": "",
                                                   "event_name": "push", "event": {}},
                      residues="3", comment="true", install="false")
    assert _step(run, "Sweep").outputs["exit-code"] == "0"      # residue 3 is clean
    comment = _step(run, "Comment")
    assert comment.ran and comment.rc == 0
    assert "not a pull request and no comment-issue: nothing to comment on" in comment.stdout
    assert _step(run, "Gate").rc == 0 and not run.failed


def test_inputs_cannot_inject_shell(installed, tmp_path):
    """Inputs reach the scripts as environment variables: shell in them stays text."""
    run = _run_action(installed, tmp_path, install="false", residues="3",
                      **{"extra-args": "--context 1024 '$(touch PWNED1)' `touch PWNED2`; touch PWNED3",
                         "spec": "mtp;touch PWNED4"})
    sweep = _step(run, "Sweep")
    assert sweep.rc == 0 and sweep.outputs["exit-code"] == "2"     # sweep: a usage error
    assert "sweep: error:" in sweep.stderr
    assert not list(tmp_path.rglob("PWNED*"))
    assert not _step(run, "Comment").ran                           # no report, no comment
    gate = _step(run, "Gate")
    assert gate.rc == 2 and "::error::sweep exited 2" in gate.stdout
