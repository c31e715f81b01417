"""Outputs of a finished sweep through the real entry point, on the lab engine: where the
report goes, the terminal's plain text, the lab notice in the file, the comment and the
step summary, preset warnings up front, and an output that fails (exit 4, the report's
path said). The REST way of posting talks HTTP to a GitHub fake on 127.0.0.1."""
from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from harness.report.engine_notice import LAB_NOTICE
from tests.ci.fake_github import FakeGitHub
from tests.conftest import ROOT
from tests.reports.test_gate import _fake_gh

REPORTS_FIXTURE = ROOT / "tests" / "reports" / "fixtures" / "lab" / "fvp.jsonl.gz"


def lab_sweep(cli, *args, env: dict | None = None):
    """A one-residue lab sweep run from the test's tmp dir (relative --out lands there)."""
    return cli("--residues", "0", "--no-progress", "--slots", "1", *args, cwd=cli.tmp, env=env)


def _no_token_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GITHUB_TOKEN", "GH_TOKEN", "GITHUB_STEP_SUMMARY", "GITHUB_REPOSITORY")}
    env.update(extra)
    return env


def test_out_puts_the_report_beside_the_results_and_the_terminal_reads_plain(tmp_path, cli):
    proc = lab_sweep(cli, "--out", "mine")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (records,) = (tmp_path / "mine").glob("*.jsonl")
    report = records.with_suffix(".md")
    assert report.is_file() and not (tmp_path / "reports").exists()
    md = report.read_text()
    assert LAB_NOTICE in md
    # the terminal: no markdown escapes, no ** or backticks, the notice in plain words
    assert "\\_" not in proc.stdout and "**" not in proc.stdout and "`" not in proc.stdout
    said = " ".join(proc.stdout.split())   # prose wraps in 120 columns (issue 50)
    assert "Engine: the CPU lab engine (engine/lab), a replica of vLLM's mechanisms" in said
    assert "not vLLM. Agreement with the Bug B rule is expected here by construction" in said


def test_reports_dir_still_wins(tmp_path, cli):
    proc = lab_sweep(cli, "--out", "mine", "--reports-dir", "elsewhere")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((tmp_path / "elsewhere").glob("*.md")) and not list((tmp_path / "mine").glob("*.md"))


def test_preset_warning_on_the_terminal_before_the_sweep(tmp_path, cli):
    proc = lab_sweep(cli, "--cudagraph", "FULL_AND_PIECEWISE", "--patches", "none",
                     "--out", "o")
    err = proc.stderr.splitlines()
    warn = [i for i, ln in enumerate(err) if ln.startswith("sweep: warning:")]
    start = next(i for i, ln in enumerate(err) if ln.startswith("run "))
    assert warn and warn[0] < start, err[:5]
    assert "FULL_AND_PIECEWISE" in err[warn[0]] and "\\_" not in err[warn[0]]
    (report,) = (tmp_path / "o").glob("*.md")
    assert "**Preset warning:**" in report.read_text()


@pytest.mark.slow
def test_step_summary_carries_the_lab_notice_and_a_failed_one_exits_4(tmp_path, cli):
    summary = tmp_path / "summary.md"
    proc = lab_sweep(cli, "--out", "o", env=_no_token_env(GITHUB_STEP_SUMMARY=str(summary)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert LAB_NOTICE in summary.read_text()
    proc = lab_sweep(cli, "--out", "o2",
                     env=_no_token_env(GITHUB_STEP_SUMMARY="/proc/forbidden/summary.md"))
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (report,) = (tmp_path / "o2").glob("*.md")
    assert "sweep: output failed: cannot append to $GITHUB_STEP_SUMMARY" in proc.stderr
    assert f"report: o2/{report.name}" in proc.stderr


def test_gh_that_fails_after_the_sweep_exits_4_with_the_report_path(tmp_path, cli):
    bindir, log = _fake_gh(tmp_path, rc=1)
    env = _no_token_env(PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    proc = lab_sweep(cli, "--out", "o", "--gh-issue", "9", env=env)
    assert proc.returncode == 4, proc.stderr[-2000:]
    (report,) = (tmp_path / "o").glob("*.md")
    assert json.loads(log.read_text())[:3] == ["issue", "comment", "9"]
    assert "could not post the report to issue #9" in proc.stderr
    assert f"report: o/{report.name}" in proc.stderr and "verdict was exit 0" in proc.stderr


# -- the REST API, over HTTP ------------------------------------------------------------
@pytest.fixture
def github(tmp_path):
    """A FakeGitHub served on 127.0.0.1 (GITHUB_API_URL points there)."""
    fake = FakeGitHub(repo="octo/lab", issues=(7,), token="tok")

    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            length = int(self.headers.get("content-length") or 0)
            req = httpx.Request(self.command, f"http://127.0.0.1{self.path}",
                                headers=dict(self.headers), content=self.rfile.read(length))
            resp = fake.handle(req)
            self.send_response(resp.status_code)
            for k, v in resp.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding"):
                    self.send_header(k, v)
            self.send_header("content-length", str(len(resp.content)))
            self.end_headers()
            self.wfile.write(resp.content)

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _rest_env(tmp_path, api: str, **extra) -> dict:
    """No gh on PATH, so the REST API is the way."""
    bindir = tmp_path / "nogh-bin"
    bindir.mkdir(exist_ok=True)
    env = _no_token_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{bindir}",
                        GITHUB_API_URL=api, **extra)
    if shutil.which("git") and not (bindir / "git").exists():
        (bindir / "git").symlink_to(shutil.which("git"))
    assert shutil.which("gh", path=env["PATH"]) is None
    return env


@pytest.mark.slow
def test_sweep_posts_through_the_rest_api_without_gh(tmp_path, github, cli):
    fake, api = github
    env = _rest_env(tmp_path, api, GITHUB_TOKEN="tok")
    proc = lab_sweep(cli, "--out", "o", "--gh-issue", "7", "--gh-repo", "octo/lab", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (comment,) = fake.on(7)
    assert LAB_NOTICE in comment["body"]
    assert "report posted to issue octo/lab#7 (REST API)" in proc.stderr
    # sweep report: the same comment is updated, not a second one added
    (records,) = (tmp_path / "o").glob("*.jsonl")
    proc = cli("report", records, "-o", tmp_path / "again.md", "--gh-issue", "7",
               env=dict(env, GITHUB_REPOSITORY="octo/lab"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(fake.on(7)) == 1 and [m for m, _ in fake.requests].count("PATCH") == 1


@pytest.mark.slow
def test_rest_refusal_after_the_sweep_exits_4(tmp_path, github, cli):
    fake, api = github
    env = _rest_env(tmp_path, api, GITHUB_TOKEN="wrong")
    proc = lab_sweep(cli, "--out", "o", "--gh-issue", "7", "--gh-repo", "octo/lab", env=env)
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert "HTTP 401" in proc.stderr and "Traceback" not in proc.stderr
    assert fake.on(7) == []
    (records,) = (tmp_path / "o").glob("*.jsonl")
    proc = cli("report", records, "-o", tmp_path / "r.md", "--gh-issue", "8",
               "--gh-repo", "octo/lab", env=dict(env, GITHUB_TOKEN="tok"))
    assert proc.returncode == 4 and "was not found" in proc.stderr
    assert f"(the report is in {tmp_path / 'r.md'})" in proc.stderr


def test_dry_run_prints_the_request_and_needs_no_token(tmp_path, github, cli):
    fake, api = github
    env = _rest_env(tmp_path, api)
    proc = cli("report", REPORTS_FIXTURE, "-o", tmp_path / "r.md", "--gh-issue", "7",
               "--gh-repo", "octo/lab", "--gh-dry-run", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"POST {api}/repos/octo/lab/issues/7/comments" in proc.stdout
    body = json.loads(proc.stdout.strip().splitlines()[-1])["body"]
    assert LAB_NOTICE in body and fake.requests == []


@pytest.mark.slow
def test_sweep_report_on_a_terminal_is_plain_text(tmp_path, cli):
    """stdout a tty: plain text; redirected: the markdown (so `> r.md` still works)."""
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    proc = subprocess.Popen([sys.executable, "-m", "harness", "report", str(REPORTS_FIXTURE)],
                            cwd=ROOT, stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    shown = b"".join(chunks).decode()
    assert proc.returncode == 0
    assert "FULL_AND_PIECEWISE vs PIECEWISE" in shown and "\\_" not in shown and "**" not in shown
    assert "answer ''" in shown and "*(empty)*" not in shown   # the short terminal report
    piped = cli("report", REPORTS_FIXTURE)
    assert "FULL\\_AND\\_PIECEWISE" in piped.stdout and LAB_NOTICE in piped.stdout


@pytest.mark.slow
def test_gh_issue_without_o_posts_from_a_named_temp_file(tmp_path, github, cli):
    fake, api = github
    env = _rest_env(tmp_path, api)
    proc = cli("report", REPORTS_FIXTURE, "--gh-issue", "7", "--gh-repo", "octo/lab",
               "--gh-dry-run", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [path] = [line.split("report: ", 1)[1] for line in proc.stderr.splitlines()
              if line.startswith("report: ")]
    body = json.loads(proc.stdout.strip().splitlines()[-1])["body"]
    assert Path(path).read_text(encoding="utf-8") in body and LAB_NOTICE in body
    assert "issue7" in Path(path).name and fake.requests == []
    Path(path).unlink()
