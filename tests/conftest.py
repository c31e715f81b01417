"""Shared fixtures: the `sweep` CLI run as a user runs it (``cli``), real server processes
on 127.0.0.1, a check that none survive, and the suite's markers (``pyproject.toml``).

Markers: ``e2e`` (through the real ``sweep`` entry point in a subprocess, with real server
processes: every test that takes the ``cli`` fixture or whose module calls ``run_cli``, and
``tests/e2e``), ``slow`` (many servers, a cluster, a build or a training run), and
``gpu_free`` (runs on a CPU-only machine: every test, unless it is marked ``gpu``). The quick
subset is ``pytest -n auto -m "not slow and not e2e"`` (docs/testing.md).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
FAKE_ENGINE = ROOT / "tests" / "servers" / "fake_engine.py"


def processes_mentioning(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if marker in " ".join(p.info["cmdline"] or []):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def is_reaper(p: psutil.Process) -> bool:
    """The run's reaper (harness.serve.orphans.GroupReaper), a child of the sweep from its start.
    False for a process that is gone or a zombie by the time it is asked (its command line
    cannot be read then: psutil raises ZombieProcess)."""
    try:
        return any(a.endswith("_reaper.py") for a in p.cmdline())
    except psutil.Error:
        return False


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    """A per-test copy of the fixture tokenizer: its path marks this test's servers."""
    d = tmp_path / "tok"
    shutil.copytree(FIXTURES / "tokenizer", d)
    return d


@pytest.fixture
def no_leftovers(tmp_path: Path):
    """Fails the test if any process whose command line names this test's tmp dir is
    still alive afterwards (a teardown bug)."""
    yield
    left = processes_mentioning(str(tmp_path))
    for p in left:
        p.kill()
    assert not left, f"server processes left behind: {[p.pid for p in left]}"


def fake_cmd(tok_dir: Path, *extra: str) -> str:
    return " ".join([sys.executable, str(FAKE_ENGINE), "--port", "{port}", "--model",
                     str(tok_dir), *extra])


def wait_for(cond, timeout: float, what: str):
    """``cond()``'s first truthy value, polled every 10 ms for at most ``timeout`` seconds;
    an ``AssertionError`` naming ``what`` when it never comes (a bounded readiness wait)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := cond():
            return got
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# -- the `sweep` CLI, run as a user runs it ------------------------------------------------
def run_cli(*args, cwd: Path = ROOT, env: dict | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` (the ``sweep`` console script's module) in a subprocess:
    this checkout's code first on ``PYTHONPATH``, output captured as text, bounded by
    ``timeout``. ``env`` replaces the environment (``PYTHONPATH`` is still set)."""
    full_env = dict(os.environ if env is None else env)
    full_env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def env_without(*names: str, prefix: str | None = None) -> dict:
    """This process's environment less ``names`` (and every name starting with ``prefix``):
    for a CLI run that must not see the caller's tokens or CI variables."""
    return {k: v for k, v in os.environ.items()
            if k not in names and not (prefix and k.startswith(prefix))}



def whole_records(out: Path) -> int:
    """Records a sweep still running has written to ``out``: a line counts once its newline
    is there (the file exists empty before the first record, and a long record is written
    in pieces). The one check every test that waits on a running sweep's file uses."""
    return sum(f.read_text().count("\n") for f in Path(out).glob("*.jsonl"))


def one_line_exit_2(proc, *needles: str) -> str:
    """A user mistake: exit 2, one line on stderr, no traceback, naming each needle."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, lines
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]

def read_jsonl(path: Path) -> list[dict]:
    """Every record of a results file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Cli:
    """One test's runner of the ``sweep`` CLI: its outputs go under the test's tmp dir
    (``results/`` and ``reports/`` unless told otherwise) and a per-test copy of the model
    directory marks its servers, so ``no_leftovers`` can find any that survive."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path

    def __call__(self, *args, cwd: Path = ROOT, env: dict | None = None,
                 timeout: float = 300) -> subprocess.CompletedProcess:
        """The CLI with exactly ``args`` (sub-verbs, usage errors, --help)."""
        return run_cli(*args, cwd=cwd, env=env, timeout=timeout)

    def lab_model(self) -> Path:
        """A per-test copy of the lab's model directory (made once)."""
        from harness.serve.engines import LAB_MODEL_DIR
        model = self.tmp / "model"
        if not model.exists():
            shutil.copytree(LAB_MODEL_DIR, model)
        return model

    def sweep(self, *args, out: str = "results", reports: str | None = "reports",
              lab_model: bool = False, rc: int | None = None, timeout: float = 300,
              env: dict | None = None) -> subprocess.CompletedProcess:
        """A sweep writing under the tmp dir, without the progress bar; ``lab_model``:
        ``--model`` is this test's copy of the lab model; ``rc``: the exit code it must
        end with (the stderr tail is the failure message)."""
        argv = [*(["--model", self.lab_model()] if lab_model else []),
                "--out", self.tmp / out,
                *(["--reports-dir", self.tmp / reports] if reports else []),
                "--no-progress", *args]
        proc = run_cli(*argv, env=env, timeout=timeout)
        if rc is not None:
            assert proc.returncode == rc, (proc.returncode, proc.stderr[-3000:])
        return proc

    def results_file(self, out: str = "results") -> Path:
        """The one results file in ``out`` (a failure when there are none or several)."""
        files = sorted((self.tmp / out).glob("*.jsonl"))
        assert len(files) == 1, files
        return files[0]

    def records(self, out: str = "results") -> list[dict]:
        """Every record of the one results file in ``out``."""
        return read_jsonl(self.results_file(out))

    def manifest(self, out: str = "results") -> dict:
        """The manifest beside the one results file in ``out``."""
        path = self.results_file(out)
        return json.loads(path.with_name(path.name[:-len(".jsonl")] + ".manifest.json")
                          .read_text())

    def report(self, reports: str = "reports") -> str:
        """The newest report in ``reports``."""
        files = sorted((self.tmp / reports).glob("*.md"), key=lambda p: p.stat().st_mtime)
        assert files, f"no report in {self.tmp / reports}"
        return files[-1].read_text()


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """The ``sweep`` CLI for this test (``Cli``); taking it marks the test ``e2e``."""
    return Cli(tmp_path)


# -- markers -------------------------------------------------------------------------------
def pytest_configure(config):
    """Byte-compile the project before any test starts a process. Where
    ``PYTHONDONTWRITEBYTECODE`` is set (as on the shared 2-vCPU boxes), no process writes
    a ``.pyc``, so each of the suite's ~800 ``sweep`` and lab-server processes compiled
    every ``harness``/``engine`` module from source: ~130 ms of CPU each. Python still
    reads a ``.pyc`` that is there and checks it against its source's mtime and size, so
    an edit made mid-run is compiled afresh, never served stale. Up-to-date files are
    skipped (~0.05 s); xdist workers leave it to the controller, which runs first."""
    if hasattr(config, "workerinput"):
        return
    import compileall
    for part in ("harness", "engine", "tests"):   # a read-only checkout: quietly nothing
        compileall.compile_dir(ROOT / part, quiet=2)


def pytest_collection_modifyitems(config, items):
    """``e2e`` on every test that runs the CLI (it takes ``cli``, or its module calls
    ``run_cli``) or lives in tests/e2e; ``gpu_free`` on every test not marked ``gpu``.
    Then the ``slow`` tests first, the other ``e2e`` ones next (each group in file
    order): pytest-xdist hands tests out in this order, so the long ones start while
    the short ones can still fill the other workers, instead of one worker running a
    minute-long cluster test alone at the end."""
    e2e_dir = ROOT / "tests" / "e2e"
    for item in items:
        module = getattr(getattr(item, "module", None), "__dict__", {})
        if ("cli" in getattr(item, "fixturenames", ()) or module.get("run_cli") is run_cli
                or e2e_dir in Path(item.path).parents):
            item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("gpu") is None:
            item.add_marker(pytest.mark.gpu_free)
    items.sort(key=lambda i: (i.get_closest_marker("slow") is None,
                              i.get_closest_marker("e2e") is None))
