"""``sweep --bisect`` under a real ``git bisect run``: a small git repository of lab-engine
variants (this tree's ``harness`` and ``engine`` code, the tiny hybrid's weights left out),
where one commit makes the lab ignore its prefill-discriminator fix (Bug B comes back
with ``--patches all``) and a later one cannot boot. The bisect must name the first bad
commit and skip the unbootable one with 125."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.publish.bisect import bisect_exit_code
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("no_leftovers")

RUNNER_LINE = '        self.discriminator = cfg.patch_on("prefill-discriminator")\n'
SWEEP = ("-m", "harness", "--spec", "mtp", "--ctx", "huge", "--cudagraph",
         "FULL_AND_PIECEWISE", "--patches", "all", "--residues", "3-5", "--slots", "2",
         "--no-progress", "--bisect")


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-2000:])
    return out.stdout


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


@pytest.fixture
def variants(tmp_path: Path) -> tuple[Path, list[str], Path]:
    """c0 good, c1 first bad (the fix ignored), c2 does not boot, c3 boots again (still
    bad), c4 and c5 bad (a tiny file the engine never reads). Returns (repo, [sha of
    c0..c5], model dir). c2 is where git's bisection of c1..c5 looks first."""
    repo = tmp_path / "lab-variants"
    ignore = shutil.ignore_patterns("__pycache__", "tinymodel", "*.pyc")
    for pkg in ("harness", "engine"):
        shutil.copytree(ROOT / pkg, repo / pkg, ignore=ignore)
    model = repo / "engine" / "lab" / "model"   # inside tmp_path: no_leftovers sees servers
    (repo / ".gitignore").write_text("__pycache__/\nresults/\nreports/\n")
    git(repo, "init", "-q")
    shas = []

    def commit(msg: str) -> None:
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", msg)
        shas.append(git(repo, "rev-parse", "HEAD").strip())

    commit("c0: the lab as in this tree")
    runner = repo / "engine" / "lab" / "model_runner.py"
    edit(runner, RUNNER_LINE, "        self.discriminator = False  # the fix, lost\n")
    commit("c1: the uniform-decode dispatch forgets the prefill check")
    main = repo / "engine" / "lab" / "__main__.py"
    original = main.read_text()
    main.write_text('raise SystemExit("this build does not boot")\n' + original)
    commit("c2: a build that cannot boot")
    main.write_text(original)
    commit("c3: boots again")
    for n in (4, 5):
        (repo / "NOTES").write_text(f"change {n}, never read by the engine\n")
        commit(f"c{n}: unrelated")
    return repo, shas, model


def sweep_at(repo: Path, model: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    return subprocess.run([sys.executable, *SWEEP, "--model", str(model), "--out",
                           str(tmp_path / "results"), "--reports-dir", str(tmp_path / "rep")],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_git_bisect_run_finds_the_first_bad_commit_and_skips_the_unbootable(variants, tmp_path):
    repo, shas, model = variants
    script = tmp_path / "test-build.sh"
    script.write_text("#!/bin/sh\n"   # every commit's own harness and lab, its own servers
                      f'PYTHONPATH="{repo}" exec "{sys.executable}" {" ".join(SWEEP)} '
                      f'--model "{model}" --out "{tmp_path}/results" --reports-dir "{tmp_path}/rep"\n')
    script.chmod(0o755)
    git(repo, "bisect", "start", shas[-1], shas[0])
    out = git(repo, "bisect", "run", str(script))
    log = git(repo, "bisect", "log")
    git(repo, "bisect", "reset")
    assert f"{shas[1]} is the first bad commit" in out, out[-3000:]
    # c2 is the first midpoint of c1..c5: the bisect had to skip it, and c1 was tested
    assert f"git bisect skip {shas[2]}" in log, log
    assert f"git bisect bad {shas[1]}" in log, log


@pytest.mark.slow
def test_each_kind_of_build_gives_its_exit_code(variants, tmp_path):
    repo, shas, model = variants
    for sha, want, word in ((shas[0], 0, "good"), (shas[1], 1, "bad"),
                            (shas[2], 125, "skip (untestable)")):
        git(repo, "checkout", "-q", sha)
        proc = sweep_at(repo, model, tmp_path)
        assert proc.returncode == want, (sha, proc.stderr[-2000:])
        assert f"bisect: {word}, exit {want}" in proc.stderr
    git(repo, "checkout", "-q", shas[0])
    env = {**os.environ, "PYTHONPATH": str(repo)}
    bad_flag = subprocess.run([sys.executable, *SWEEP, "--residues", "x"], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=60)
    assert bad_flag.returncode == 128 and bad_flag.stderr.count("\n") == 1, bad_flag.stderr


def test_the_exit_code_rests_on_every_point():
    from harness.records.phase_record import PhaseRecord
    v = lambda verdict: PhaseRecord.from_dict({"verdict": verdict, "phase": "cold"})  # noqa: E731
    ok = v("ok")
    assert bisect_exit_code([ok, ok]) == 0
    assert bisect_exit_code([ok, v("broken"), v("boot-fail")]) == 1
    assert bisect_exit_code([ok, v("crash")]) == 1
    assert bisect_exit_code([v("boot-fail")] * 2) == 125
    assert bisect_exit_code([ok, v("infra")]) == 125
    assert bisect_exit_code([v("invalid")]) == 125
    assert bisect_exit_code([]) == 125


def bisect_sweep(tmp_path: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    model = tmp_path / "model"
    if not model.exists():
        shutil.copytree(ROOT / "engine" / "lab" / "model", model)
    argv = [*SWEEP[2:], "--model", str(model), "--out", str(tmp_path / "results"),
            "--reports-dir", str(tmp_path / "rep"), *args]
    cmd = ["-c", code % (argv,)] if code else ["-m", "harness", *argv]
    return subprocess.run([sys.executable, *cmd], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("reference", [("--reference", "cold"),
                                       ("--reference", "first", "--block-size", "16,128")])
@pytest.mark.slow
def test_a_clean_build_is_good_under_the_references_with_unjudged_cells(tmp_path, reference):
    # issue 23 item 5: the cold cells (cold) and the first configuration's (first) are
    # unjudged by design; the answers judged against them make the point tested
    proc = bisect_sweep(tmp_path, *reference)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "bisect: good, exit 0" in proc.stderr and "unjudged=" in proc.stderr


@pytest.mark.slow
def test_nothing_judged_is_still_untestable(tmp_path):
    proc = bisect_sweep(tmp_path, "--reference", "cold", "--phases", "cold")
    assert proc.returncode == 125, proc.stderr[-2000:]


def test_an_internal_error_under_bisect_is_not_bad(tmp_path):
    boom = ("import sys, harness.command.cli as c\n"
            "def boom(args): raise RuntimeError('a harness bug')\n"
            "c.run_sweep = boom\nsys.argv = ['sweep'] + %r\nc.main()\n")
    proc = bisect_sweep(tmp_path, code=boom)
    assert proc.returncode == 125, proc.stderr[-2000:]
    assert "RuntimeError: a harness bug" in proc.stderr
    assert proc.stderr.rstrip().endswith("exit 125 (this commit untested)")
