"""benchmarks/flaky_tally.py: the JUnit XML it reads, the per-test tally it prints, its
exit codes (docs/testing.md, "Flaky tests")."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil

from benchmarks import flaky_tally as ft
from tests.conftest import ROOT

XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.harness.test_verdict" name="test_a[x]"/>
<testcase classname="tests.harness.test_verdict" name="test_b">
  <failure message="assert 'reference then' in 'differs'&#10;more">tb</failure></testcase>
<testcase classname="tests.harness.test_verdict" name="test_c"><skipped message="no vllm"/></testcase>
<testcase classname="tests.harness.test_verdict.TestK" name="test_d">
  <error message="error at setup of test_d">tb</error></testcase>
</testsuite></testsuites>"""


def test_a_junit_file_is_read_as_pytest_names_its_tests(tmp_path):
    (tmp_path / "run-1.xml").write_text(XML)
    res = ft.read_junit(tmp_path / "run-1.xml")
    assert (res.passed, res.skipped) == (1, 1)
    assert res.failed == {
        "tests/harness/test_verdict.py::test_b": "assert 'reference then' in 'differs'",
        "tests/harness/test_verdict.py::TestK::test_d": "error at setup of test_d"}


def test_the_table_counts_each_test_over_the_runs_and_the_exit_says_if_any_failed(tmp_path):
    (tmp_path / "run-1.xml").write_text(XML)
    (tmp_path / "run-2.xml").write_text(XML.replace("<failure", "<skipped").replace(
        "</failure>", "</skipped>").replace("<error", "<skipped").replace("</error>", "</skipped>"))
    text, bad = ft.table(tmp_path)
    assert bad == 1
    assert text.splitlines()[0] == "2 runs, 1 with a failure, 2 test id(s) failed at least once"
    assert "| 1/2 | `tests/harness/test_verdict.py::test_b` |" in text
    assert ft.main(["--out", str(tmp_path), "--tally-only"]) == 1


def test_runs_pytest_n_times_and_keeps_a_line_per_run(tmp_path):
    out = tmp_path / "tally"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flaky_tally.py"),
                           "--runs", "2", "--out", str(out), "--", "-q", "-p",
                           "no:cacheprovider", "tests/harness/test_verdict.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [json.loads(ln) for ln in (out / "runs.jsonl").read_text().splitlines()]
    assert [ln["run"] for ln in lines] == [1, 2] and all(ln["rc"] == 0 for ln in lines)
    assert all(ln["passed"] > 0 and ln["failed"] == [] for ln in lines)
    assert "2 runs, 0 with a failure" in proc.stdout


def test_a_usage_mistake_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flaky_tally.py"),
                           "--out", str(tmp_path / "none"), "--tally-only"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


def test_a_fresh_run_is_the_readme_command_in_a_new_clone_and_venv(tmp_path):
    co = ft.Checkout(tmp_path / "clone", str(tmp_path / "venv" / "bin" / "python"))
    xml = tmp_path / "run-1.xml"
    assert ft.pytest_argv("readme", co, ["-n", "auto"], xml) == [
        co.python, "-m", "pytest", "-n", "auto", f"--junitxml={xml}"]
    assert ft.pytest_argv("ci", co, ["-x"], xml) == ["bash", ".ci/run", "-x", f"--junitxml={xml}"]


def test_a_fresh_shell_has_no_other_venv_and_no_ci_switches(monkeypatch):
    monkeypatch.setenv("VIRTUAL_ENV", "/opt/other-venv")
    monkeypatch.setenv("PATH", os.pathsep.join(["/opt/other-venv/bin", "/usr/bin"]))
    monkeypatch.setenv("RESIDUE_LAB_REQUIRE_VLLM", "1")
    monkeypatch.setenv("PYTHONPATH", "/work")
    env = ft.fresh_env()
    assert env["PATH"] == "/usr/bin"
    assert not {"VIRTUAL_ENV", "RESIDUE_LAB_REQUIRE_VLLM", "PYTHONPATH"} & set(env)


def test_busy_loops_load_the_machine_and_end_with_the_run():
    loops = ft.busy_loops(2)
    try:
        deadline = time.monotonic() + 30
        while not all(psutil.Process(p.pid).cpu_times().user > 0.1 for p in loops):
            assert time.monotonic() < deadline, "a busy loop used no CPU in 30 s"
            time.sleep(0.05)
    finally:
        for p in loops:
            p.kill()
            p.wait()
    assert all(p.returncode is not None for p in loops)


def test_a_negative_busy_is_a_usage_mistake(tmp_path, capsys):
    assert ft.main(["--out", str(tmp_path), "--busy", "-1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
