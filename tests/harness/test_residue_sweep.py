"""One sweep lifecycle (``harness.residue_sweep.Sweep``): the Python API in-process, and
``sweep explain`` running its rungs through the same lifecycle as ``sweep`` (the run's
launcher, ``--cache-dir``, SIGINT, rejudging under ``--reference first``). Real lab
servers on 127.0.0.1; the lab model is copied under the test's tmp dir, so
``no_leftovers`` sees every server."""
from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from harness import Callbacks, ExitCode, RunResult, Sweep, options_from_argv
from harness.serve.engines import LAB_MODEL_DIR
from tests.conftest import ROOT, run_cli, wait_for

pytestmark = pytest.mark.usefixtures("no_leftovers")

FULL_UNPATCHED = ("--spec", "mtp", "--ctx", "huge", "--cudagraph", "FULL_AND_PIECEWISE",
                  "--patches", "none")
H200_RUN = ROOT / "reports" / "h200" / "results" / "20261130-030446-b166.jsonl.gz"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    shutil.copytree(LAB_MODEL_DIR, tmp_path / "model")
    return tmp_path / "model"


def harness(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return run_cli(*args, timeout=timeout)


def parent_run(tmp_path: Path, model: Path, *args: str) -> str:
    proc = harness(*FULL_UNPATCHED, "--model", str(model), "--out", str(tmp_path / "r"),
                   "--no-progress", "--slots", "2", "--residues", "4", *args)
    assert proc.returncode == 1, proc.stderr[-2000:]
    return re.search(r"run (\d{8}-\d{6}-[0-9a-f]{4})", proc.stderr).group(1)


def child_of(out: Path, parent: str) -> tuple[dict, list[dict]]:
    """The explain run linked to ``parent``: its manifest and records."""
    (m,) = [m for m in (json.loads(p.read_text()) for p in out.glob("*.manifest.json"))
            if (m.get("explains") or {}).get("run_id") == parent]
    path = out / f"{m['run_id']}.jsonl"
    if not path.is_file():
        return m, []
    # the run may still be writing: a line counts only once its newline is there
    whole = path.read_text().rpartition("\n")[0]
    return m, [json.loads(x) for x in whole.splitlines() if x]


class Heard(Callbacks):
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.points: list[int] = []
        self.started_with: int | None = None
        self.report_md = ""

    def say(self, line: str) -> None:
        self.lines.append(line)

    def started(self, run_id: str, points: int) -> None:
        self.started_with = points

    def point_done(self, point, records: list, verdicts: Counter) -> None:
        from harness.records.phase_record import PhaseRecord
        assert records and all(isinstance(r, PhaseRecord) for r in records)  # one shape
        self.points.append(point.residue)

    def report(self, markdown: str) -> None:
        self.report_md = markdown


def test_the_python_api_runs_a_sweep_in_process_and_says_nothing(tmp_path, model, capsys):
    opts = options_from_argv([*FULL_UNPATCHED, "--model", str(model), "--residues", "3-4",
                              "--slots", "2", "--out", str(tmp_path / "r")])
    result = Sweep(opts).run()
    assert isinstance(result, RunResult) and not result.interrupted
    assert result.exit_code == ExitCode.NOT_OK == result.manifest.exit_code
    assert [(r.residue, r.phase, r.verdict) for r in result.not_ok] == \
        [(4, "self-hit", "broken")]
    assert len(result.records) == 4 and result.records_path.is_file()
    assert [r.as_dict() for r in result.records] == [   # the records are what was written
        json.loads(line) for line in result.records_path.read_text().splitlines()]
    assert result.report_path.read_text() == result.report_markdown
    assert "residue" in result.report_markdown
    seen = capsys.readouterr()
    assert seen.out == "" and seen.err == ""   # a library says nothing unless asked


def test_the_python_api_honours_dry_run(tmp_path, model):
    """Issue 33 item 9: ``--dry-run`` through the API is the plan and the server commands,
    as on the command line: no server booted (not even a probe), no records, exit 0."""
    started: list = []
    opts = options_from_argv([*FULL_UNPATCHED, "--model", str(model), "--residues", "3-4",
                              "--dry-run", "--out", str(tmp_path / "r")])
    heard = Heard()
    result = Sweep(opts, observers=(lambda event, srv: started.append(srv),)).run(heard)
    assert started == [] and result.dry_run and result.exit_code == ExitCode.OK
    assert result.records == [] and not list((tmp_path / "r").glob("*.jsonl"))
    assert "nothing started (--dry-run)" in result.report_markdown
    assert "server: " in result.report_markdown and heard.report_md == result.report_markdown


def test_callbacks_hear_every_point_and_the_report(tmp_path, model):
    opts = options_from_argv([*FULL_UNPATCHED, "--model", str(model), "--residues", "2-4",
                              "--patches", "all", "--slots", "2", "--out", str(tmp_path / "r")])
    heard = Heard()
    result = Sweep(opts).run(heard)
    assert result.exit_code == ExitCode.OK and result.not_ok == []
    assert heard.started_with == 3 and sorted(heard.points) == [2, 3, 4]
    assert heard.report_md == result.report_markdown
    assert any(line.startswith(f"run {result.run_id}: 3 data points") for line in heard.lines)


@pytest.mark.slow   # a parent sweep, then a ladder of lab servers
def test_explain_runs_its_rungs_with_the_runs_prefork_launcher(tmp_path, model):
    parent = parent_run(tmp_path, model, "--launcher", "prefork")
    ex = harness("explain", parent, "--out", str(tmp_path / "r"), "--slots", "2")
    assert ex.returncode == 0, ex.stderr[-3000:]
    manifest, records = child_of(tmp_path / "r", parent)
    assert manifest["launcher"] == "prefork" and manifest["backend"]["launcher"] == "prefork"
    assert manifest["backend"]["fork_server"] is True
    assert records and {r["server_boot"]["launcher"] for r in records} == {"forked"}
    assert manifest["exit_code"] == 0 and not manifest["interrupted"]
    assert "Discriminators" in ex.stdout


def test_explain_takes_the_cache_dir_to_every_rung(tmp_path):
    """--cache-dir (vLLM only) reaches the adapter the rungs run with: on the committed
    H200 run, every rung's server command names it."""
    if not H200_RUN.is_file():
        pytest.skip("no committed H200 run")
    cache = tmp_path / "cc"
    proc = harness("explain", str(H200_RUN), "--dry-run", "--out", str(tmp_path),
                   "--cache-dir", str(cache))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rungs = [ln for ln in proc.stdout.splitlines() if ln.startswith("  ") and "not run" not in ln]
    assert len(rungs) >= 5 and all(str(cache) in ln for ln in rungs), proc.stdout
    from harness.explain import plan as explain
    xp = explain.prepare(str(H200_RUN), str(tmp_path), residue=None, phase=None,
                         run_flags={"out": str(tmp_path), "isolation": "fresh", "resume": None,
                                    "dry_run": False, "baseline": None, "junit": None,
                                    "gh_issue": None, "cache_dir": str(cache)},
                         runners_for=lambda e: ())
    sweep = explain.ExplainSweep(xp)
    assert sweep.adapter.cache_dir == cache.resolve()
    assert sweep.options.serving.cache_dir == cache


@pytest.mark.slow   # a parent sweep, then a ladder of lab servers
def test_explain_judges_rungs_against_the_parents_first_reference(tmp_path, model):
    """A first / consensus parent: the rungs are judged against the answer the parent's
    matrix reference chose (the lifecycle's golden step), none left unjudged."""
    parent = parent_run(tmp_path, model, "--reference", "first", "--patches", "none,all")
    ex = harness("explain", parent, "--out", str(tmp_path / "r"), "--slots", "2")
    assert ex.returncode == 0, ex.stderr[-3000:]
    manifest, records = child_of(tmp_path / "r", parent)
    assert manifest["reference"] == f"golden:{parent}"
    assert records and not [r for r in records if r["verdict"] == "unjudged"]
    assert {r["verdict"] for r in records} == {"ok", "broken"}
    broken = {(r["config_label"], r["phase"]) for r in records if r["verdict"] == "broken"}
    assert all(phase == "self-hit" for _, phase in broken), broken


@pytest.mark.slow   # a parent sweep, then a ladder of lab servers
def test_explain_interrupted_ends_like_a_sweep(tmp_path, model):
    parent = parent_run(tmp_path, model)
    out = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "explain", parent, "--out",
                             str(out), "--slots", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: child_of(out, parent)[1] if any(
            (json.loads(p.read_text()).get("explains") or {}).get("run_id") == parent
            for p in out.glob("*.manifest.json")) else None, 120, "a rung's first record")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, stderr[-2000:]
    assert "Traceback" not in stderr and "no server left running" in stderr
    manifest, records = child_of(out, parent)
    assert manifest["interrupted"] is True and manifest["exit_code"] == 130
    assert records and all(r["verdict"] for r in records)


def test_two_sweeps_in_one_process_see_only_their_own_servers(tmp_path, model, monkeypatch):
    """Two ``Sweep``s running at once in one process (a test suite running two through the
    Python API): each run's pid file lists only its own servers (a server log under its
    own ``--out``), and the one that ends first stops only its own servers, so both get
    the same verdicts as one sweep alone would."""
    import asyncio

    from harness.serve import orphans
    written: dict[str, list[dict]] = {}
    real_write = orphans.PidFile._write

    def spy(self) -> None:   # every state of every pid file, as it was written
        real_write(self)
        written.setdefault(self.run_id, []).append(
            {"logs": [s["log"] for s in self.servers.values()]})
    monkeypatch.setattr(orphans.PidFile, "_write", spy)

    heard: dict[str, list[tuple[str, Path]]] = {"a": [], "b": []}

    def sweep(name: str, residues: str) -> Sweep:
        return Sweep(options_from_argv([*FULL_UNPATCHED, "--model", str(model), "--patches",
                                        "all", "--residues", residues, "--slots", "1",
                                        "--out", str(tmp_path / name)]), signals=False,
                     observers=(lambda event, srv: heard[name].append((event, srv.log_path)),))

    async def both():
        return await asyncio.gather(sweep("a", "2-3").run_async(), sweep("b", "2-4").run_async())

    a, b = asyncio.run(both())
    for result, name in ((a, "a"), (b, "b")):
        states = written[result.run_id]
        assert states and any(s["logs"] for s in states)   # the observer saw its servers
        out = (tmp_path / name).resolve()
        others = sorted({log for s in states for log in s["logs"]
                         if out not in Path(log).resolve().parents})
        assert others == [], f"run {name}'s pid file listed another run's servers: {others}"
        assert not list(out.glob("*.servers.json"))   # removed at the clean end
        # the caller's observer: each of its servers (one per point) started and stopped
        started = [log for event, log in heard[name] if event == "started"]
        assert len(started) == len(result.records) // 2
        assert sorted(started) == sorted(log for event, log in heard[name] if event == "stopped")
        assert all(out in Path(log).resolve().parents for log in started)
    # the first to end stopped none of the other's servers (a killed one: crash records)
    assert [(r.residue, r.verdict) for r in a.not_ok + b.not_ok] == []
    assert a.exit_code == b.exit_code == ExitCode.OK
    assert len(a.records) == 4 and len(b.records) == 6
