"""Bad input through the real entry point (``python -m harness``, which the ``sweep``
console script also runs): one line on stderr, exit 2, no traceback, and no server
started. "No server started" is observed, not assumed: the engine is ``--engine cmd``
with a server command that leaves a marker file the moment it runs."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, one_line_exit_2

REPORTS_FIXTURE = ROOT / "tests" / "reports" / "fixtures" / "cmd" / "fake-break4.jsonl"



@pytest.fixture
def marked_server(tmp_path):
    """cmd-engine flags whose server leaves ``marker`` when it starts."""
    marker = tmp_path / "server-started"
    tok = tmp_path / "tok"
    shutil.copytree(FIXTURES / "tokenizer", tok)
    cmd = f"{sys.executable} -c \"open('{marker}', 'w')\" {{port}}"
    return marker, ["--engine", "cmd", "--model", tok, "--server-cmd", cmd,
                    "--boot-timeout", "2", "--residues", "0", "--no-progress"]


# -- results files -------------------------------------------------------------------
@pytest.mark.parametrize("content, needle", [
    (None, "/etc/passwd line 1: not a results file: not JSON"),
    ("not json at all\n", "line 1: not a results file: not JSON"),
    ("", "no records in it"),
    ('{"bad": 1}\n', "line 1: not a phase record: missing 'run_id'"),
    ("[1, 2]\n", "line 1: a JSON list, not a record object"),
])
def test_report_of_a_file_that_is_not_records(tmp_path, content, needle, cli):
    if content is None:
        path = Path("/etc/passwd")
    else:
        path = tmp_path / "r.jsonl"
        path.write_text(content)
    one_line_exit_2(cli("report", path), needle)


@pytest.mark.slow
def test_a_bad_line_in_the_middle_is_named_by_number(tmp_path, cli):
    good = REPORTS_FIXTURE.read_text().splitlines()
    rec = json.loads(good[0])
    bad = dict(rec, verdict="fine")
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([good[0], good[1], json.dumps(bad), good[2]]) + "\n")
    one_line_exit_2(cli("report", path), f"{path} line 3: verdict 'fine' is not one of")


@pytest.mark.slow
def test_a_torn_last_line_is_what_a_killed_sweep_leaves_and_reads(tmp_path, cli):
    text = REPORTS_FIXTURE.read_text()
    path = tmp_path / "torn.jsonl"
    path.write_text(text + text.splitlines()[0][:40])   # no newline: cut mid-write
    proc = cli("report", path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_compare_with_garbage(tmp_path, cli):
    one_line_exit_2(cli("compare", "garbage", REPORTS_FIXTURE), "garbage: not a results file")
    junk = tmp_path / "garbage.jsonl"
    junk.write_text("hello\n")
    one_line_exit_2(cli("compare", junk, REPORTS_FIXTURE), "line 1: not a results file")
    one_line_exit_2(cli("compare", REPORTS_FIXTURE, junk), "line 1: not a results file")


def test_baseline_that_is_not_records_fails_before_any_server(tmp_path, marked_server, cli):
    marker, flags = marked_server
    junk = tmp_path / "base.jsonl"
    junk.write_text('{"bad": 1}\n')
    one_line_exit_2(cli(*flags, "--out", tmp_path / "o", "--baseline", junk), "--baseline:")
    assert not marker.exists()


# -- output folders --------------------------------------------------------------------
@pytest.mark.slow
def test_output_folders_are_checked_before_any_server(tmp_path, marked_server, cli):
    marker, flags = marked_server
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    one_line_exit_2(cli(*flags, "--out", "/proc/forbidden/x"), "--out: cannot create /proc/forbidden/x")
    one_line_exit_2(cli(*flags, "--out", a_file), f"--out: {a_file} exists and is not a folder")
    one_line_exit_2(cli(*flags, "--out", tmp_path / "o", "--reports-dir", a_file / "r"),
                    "--reports-dir: cannot create")
    one_line_exit_2(cli(*flags, "--out", tmp_path / "o", "--junit", tmp_path), "--junit:")
    assert not marker.exists()
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_report_output_file_in_a_folder_that_cannot_be(tmp_path, cli):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    one_line_exit_2(cli("report", REPORTS_FIXTURE, "-o", a_file / "r.md"), "-o:", "is not a folder")
    one_line_exit_2(cli("report", REPORTS_FIXTURE, "-o", tmp_path), "-o:", "is a folder")


# -- a way to post ---------------------------------------------------------------------
def _env_without_gh(tmp_path) -> dict:
    """PATH with only the interpreter's folder and a folder of basic tools, no gh."""
    bindir = tmp_path / "nogh-bin"
    bindir.mkdir(exist_ok=True)
    for tool in ("git", "sh", "env"):
        found = shutil.which(tool)
        if found:
            (bindir / tool).symlink_to(found)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{bindir}"
    assert shutil.which("gh", path=env["PATH"]) is None
    return env


@pytest.mark.slow
def test_gh_issue_without_gh_or_token_fails_before_the_sweep(tmp_path, marked_server, cli):
    marker, flags = marked_server
    env = _env_without_gh(tmp_path)
    one_line_exit_2(cli(*flags, "--out", tmp_path / "o", "--gh-issue", "5", env=env),
                    "--gh-issue: no way to post", "GITHUB_TOKEN")
    one_line_exit_2(cli("report", REPORTS_FIXTURE, "-o", tmp_path / "r.md", "--gh-issue", "5",
                        env=env), "--gh-issue: no way to post")
    env["GITHUB_TOKEN"] = "t"
    env.pop("GITHUB_REPOSITORY", None)
    one_line_exit_2(cli(*flags, "--out", tmp_path / "o", "--gh-issue", "5", cwd=tmp_path,
                        env=env), "no repository is known", "--gh-repo")
    assert not marker.exists()


# -- --resume ----------------------------------------------------------------------------
def _manifest(out: Path, run_id: str, command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{run_id}.manifest.json").write_text(json.dumps({"run_id": run_id, "command": command}))


@pytest.mark.slow
def test_resume_refuses_a_flag_that_changes_the_plan(tmp_path, marked_server, cli):
    marker, flags = marked_server
    out = tmp_path / "o"
    _manifest(out, "r1", "sweep --spec mtp --residues 0 --out " + str(out))
    one_line_exit_2(cli("--resume", "r1", "--out", out, "--residues", "0-3"),
                    "--residues 0-3 differs from the run's --residues 0")
    one_line_exit_2(cli("--resume", "r1", "--out", out, "--spec", "dflash2"),
                    "--spec dflash2 differs from the run's --spec mtp")
    one_line_exit_2(cli("--resume", "r1", "--out", out, "--no-prefix-cache"),
                    "--no-prefix-cache differs from the run's the preset's default")
    one_line_exit_2(cli("--resume", "nope", "--out", out), "--resume: no manifest for run nope")
    (out / "broken.manifest.json").write_text("{not json")
    one_line_exit_2(cli("--resume", "broken", "--out", out), "--resume:", "not a run manifest")
    (out / "nocmd.manifest.json").write_text("{}")
    one_line_exit_2(cli("--resume", "nocmd", "--out", out), "command line cannot be read")


@pytest.mark.slow
def test_resume_takes_the_flags_that_may_change(tmp_path, cli):
    """--slots, --timeout, --no-progress, --reports-dir apply; the plan is the manifest's
    (residue 0 only, although nothing on the resume line says so)."""
    out = tmp_path / "o"
    _manifest(out, "r2", f"sweep --residues 0 --spec mtp --out {out} --slots 2")
    proc = cli("--resume", "r2", "--out", out, "--slots", "1", "--timeout", "30",
               "--no-progress", "--reports-dir", tmp_path / "rep", "--spec", "mtp")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ", 1 slot, " in proc.stderr
    recs = [json.loads(ln) for ln in (out / "r2.jsonl").read_text().splitlines()]
    assert sorted((r["residue"], r["phase"]) for r in recs) == [(0, "cold"), (0, "self-hit")]
    assert (tmp_path / "rep" / "r2.md").is_file()


# -- flags' own messages -----------------------------------------------------------------
def test_reversed_range_says_so(cli):
    one_line_exit_2(cli("--residues", "5-3", "--dry-run"), "the range is reversed")


def test_help_text_of_max_tokens_and_timeout_default(cli):
    proc = cli("--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "--max-tokens MAX_TOKENS most tokens a measured answer may generate (default 256)" in text
    assert "--timeout TIMEOUT per request, seconds (default 120)" in text


def test_version_prints_the_version_and_the_source_digest(cli):
    from harness import __version__
    from harness.provenance import source_digest
    proc = cli("--version")
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.startswith(f"sweep (residue-lab) {__version__}: {__version__}+")
    assert line.endswith(f"source digest {source_digest()}")


# -- dummy weights: cost only, no verdicts (issue 35) ------------------------------------
SHAPE = ROOT / "benchmarks" / "shapes" / "qwen35-2b-dummy"


@pytest.mark.parametrize("spelling", [
    ["--engine-arg=--load-format=dummy"],
    ["--engine-arg=--load_format=DUMMY"],
    ["--engine-arg=--load-format", "--engine-arg=dummy"],
    ["--engine-arg=--load-format=safetensors", "--engine-arg=--load-format=dummy"],
    ["--engine-arg=--config", "--engine-arg={yaml}"],
])
def test_a_sweep_of_dummy_weights_is_refused_in_one_line(tmp_path, cli, spelling):
    """vLLM's dummy loader makes every answer noise: no verdict may come of it, in any
    spelling that reaches vLLM (a --config YAML file included). Before the refusal each of
    these dry runs exited 0 and printed the server command."""
    yaml = tmp_path / "serve.yaml"
    yaml.write_text("max-num-seqs: 8\nload_format: dummy\n")
    args = [a.replace("{yaml}", str(yaml)) for a in spelling]
    one_line_exit_2(cli("--engine", "vllm", "--model", str(SHAPE), "--residues", "4",
                        "--dry-run", *args),
                    "--load-format dummy starts vLLM with random weights",
                    "no verdict", "cost only")


def test_a_cmd_server_of_dummy_weights_is_refused_before_it_starts(tmp_path, cli):
    marker = tmp_path / "server-started"
    cmd = (f"sh -c \"touch {marker}; {sys.executable} -m vllm.entrypoints.openai.api_server "
           f"--model {{model}} --port {{port}} --load-format dummy\"")
    one_line_exit_2(cli("--engine", "cmd", "--model", str(SHAPE), "--server-cmd", cmd,
                        "--residues", "4", "--boot-timeout", "2", "--no-progress"),
                    "--load-format dummy starts vLLM with random weights")
    assert not marker.exists()


@pytest.mark.parametrize("spelling", [
    ["--engine-arg=--load-format=safetensors"],
    ["--engine-arg=--load-format=dummy", "--engine-arg=--load-format=auto"],
    ["--engine-arg=--config", "--engine-arg={yaml}", "--engine-arg=--load-format=auto"],
])
def test_a_real_load_format_is_not_refused(tmp_path, spelling):
    from harness.serve.engines import dummy_weights_refusal
    yaml = tmp_path / "serve.yaml"
    yaml.write_text("load-format: dummy\n")
    argv = [a.split("=", 1)[1].replace("{yaml}", str(yaml)) for a in spelling]
    assert dummy_weights_refusal(["python", "-m", "vllm", *argv]) is None
    assert dummy_weights_refusal(["python", "--config", str(yaml)]) is not None
