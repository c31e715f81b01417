"""The pytest plugin (``harness/pytest_plugin.py``) and ``examples/test_residues.py``.

The example runs as a user runs it: ``python -m pytest examples/test_residues.py -n 2`` in
a subprocess, sweeping the lab engine; the unpatched FULL configuration must fail with the
residue-4 cell in its message and every other item pass; JUnit, ``--lf`` and ``-k`` work
as pytest users expect, and the ``pytest11`` entry point declared in pyproject.toml loads
the plugin without ``-p``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from junitparser import JUnitXml

from harness.pytest_plugin import configurations, residue_blocks, worker_slot_flags
from tests.conftest import ROOT

EXAMPLE = "examples/test_residues.py"
FAILING = "test_mtp_cache_hit[FULL_AND_PIECEWISE-none]"


def pytest_run(*args: str, env: dict | None = None, timeout: float = 400):
    return subprocess.run([sys.executable, "-m", "pytest", EXAMPLE, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def pytest_file(test_file, out, *args: str, timeout: float = 120):
    """pytest on a test file written by the test, with the plugin and its --residue-out."""
    return subprocess.run([sys.executable, "-m", "pytest", str(test_file), "-p",
                           "harness.pytest_plugin", "-p", "no:cacheprovider", *args,
                           "--residue-out", str(out)], cwd=test_file.parent,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def entry_point_dist(tmp_path: Path) -> Path:
    """A dist-info carrying exactly the pytest11 entry points pyproject.toml declares, so
    pytest finds the plugin the way an installed residue-lab makes it find it."""
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    dist = tmp_path / "site" / "residue_lab_entry_probe-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: residue-lab-entry-probe\n"
                                   "Version: 0.0\n")
    (dist / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in eps["pytest11"].items()))
    return dist.parent


@pytest.mark.e2e   # the real sweep in a subprocess, with real lab servers
def test_the_example_fails_on_unpatched_full_graphs_only(tmp_path):
    out, junit, cache = tmp_path / "out", tmp_path / "junit.xml", tmp_path / "cache"
    r = pytest_run("-n", "2", "-p", "harness.pytest_plugin", "--residue-out", str(out),
                   "--junitxml", str(junit), "-o", f"cache_dir={cache}")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 failed, 4 passed" in r.stdout, r.stdout[-3000:]
    assert f"FAILED {EXAMPLE}::{FAILING}" in r.stdout
    assert "residue 4 self-hit: broken" in r.stdout
    # JUnit: one testcase per configuration, the failure message is the non-ok cell
    cases = {c.name: c for suite in JUnitXml.fromfile(str(junit)) for c in suite}
    assert len(cases) == 5, sorted(cases)
    failed = {n: c for n, c in cases.items() if c.result}
    assert list(failed) == [FAILING]
    message = failed[FAILING].result[0].message
    assert "residue 4 self-hit: broken" in message and "FULL_AND_PIECEWISE" in message
    # every sweep's records and report landed in --residue-out, one slot per xdist worker
    assert len(list(out.glob("*.jsonl"))) == 5 and len(list(out.glob("*.md"))) == 5
    slots = {line.split('"slot": "')[1].split('"')[0]
             for f in out.glob("*.jsonl") for line in f.read_text().splitlines()}
    assert slots == {"cpu0"}

    # --lf: only the item that failed runs again, and fails again
    r = pytest_run("-p", "harness.pytest_plugin", "--lf", "--residue-out", str(out),
                   "-o", f"cache_dir={cache}")
    assert r.returncode == 1 and "1 failed, 4 deselected" in r.stdout, r.stdout[-2000:]


@pytest.mark.e2e   # the real sweep in a subprocess, with real lab servers
def test_k_selects_one_configuration_and_the_entry_point_loads_the_plugin(tmp_path):
    site = entry_point_dist(tmp_path)
    r = pytest_run("-k", "PIECEWISE-all and not FULL", "--residue-out", str(tmp_path / "out"),
                   "-p", "no:cacheprovider",
                   env={"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 passed, 4 deselected" in r.stdout
    assert len(list((tmp_path / "out").glob("*.jsonl"))) == 1


def test_configurations_are_the_matrix_in_sweep_order():
    params = configurations("--cudagraph FULL_AND_PIECEWISE,PIECEWISE --patches none,all "
                            "--spec mtp")
    assert [p.id for p in params] == ["FULL_AND_PIECEWISE-none", "FULL_AND_PIECEWISE-all",
                                      "PIECEWISE-none", "PIECEWISE-all"]
    assert params[1].values[0] == ["--cudagraph", "FULL_AND_PIECEWISE", "--patches", "all",
                                   "--spec", "mtp"]
    with pytest.raises(ValueError):
        configurations("--cudagraph")
    blocks = residue_blocks(48)
    assert [b.values[0] for b in blocks] == [["--residues", "0-47"], ["--residues", "48-95"],
                                             ["--residues", "96-127"]]


@pytest.mark.parametrize("flags, worker, gpus, want", [
    ([], None, None, []),
    ([], "gw1", None, ["--slots", "1"]),
    ([], "gw3", "0,1", ["--gpus", "1"]),
    ([], None, "2,3", ["--gpus", "2"]),
    (["--slots", "4"], "gw0", "0", []),
    (["--url", "http://x:1"], "gw0", None, []),
])
def test_a_workers_slot_comes_from_its_xdist_id(flags, worker, gpus, want):
    assert worker_slot_flags(flags, worker, gpus) == want


def test_a_usage_error_fails_the_test_with_sweeps_one_line(tmp_path):
    test_file = tmp_path / "test_bad.py"
    test_file.write_text(
        "import pytest\n\n"
        "@pytest.mark.residue_sweep('--spec', 'bogus')\n"
        "def test_marked():\n    pass\n\n"
        "def test_fixture(residue_sweep):\n    residue_sweep('--max-requests', '5')\n")
    r = pytest_file(test_file, tmp_path / "out")
    assert r.returncode == 1 and "2 failed" in r.stdout, r.stdout[-3000:]
    assert "--spec: 'bogus' is not valid" in r.stdout
    assert "--max-requests is for --url" in r.stdout
    assert "Traceback" not in r.stdout


def test_the_plugins_options_never_collide_with_a_projects_own(tmp_path):
    """Issue 36: the plugin registered a global ``--out``, so a project whose conftest adds
    ``--out`` crashed at start-up (``conflicting option string``). Loaded through its
    entry point, as an install makes it load in every pytest run of the environment."""
    site = entry_point_dist(tmp_path)
    (tmp_path / "conftest.py").write_text(
        "def pytest_addoption(parser):\n"
        "    parser.addoption('--out', default='x')\n"
        "    parser.addoption('--baseline', default=None)\n"
        "    parser.addoption('--args', default=None)\n")
    (tmp_path / "test_own.py").write_text(
        "def test_own(request):\n    assert request.config.getoption('out') == 'mine'\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "test_own.py", "--out", "mine",
                        "-p", "no:cacheprovider", "-q"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])})
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    from harness import pytest_plugin

    class Group:
        def __init__(self):
            self.names = []

        def addoption(self, *names, **_):
            self.names += names

    class Parser:
        group = Group()

        def getgroup(self, *_):
            return self.group
    pytest_plugin.pytest_addoption(Parser())
    assert Parser.group.names and all(n.startswith("--residue-") for n in Parser.group.names)


def test_with_a_baseline_the_failure_names_the_cells_the_gate_failed_on():
    """Issue 33 item 5 in the plugin: a known-broken cell that failed to boot is lost
    coverage, and the test's message names it (it said "no cell is not ok")."""
    from types import SimpleNamespace

    from harness.publish.gate import gate_block
    from harness.pytest_plugin import failure_message
    from tests.reports import synth
    cfg = synth.make_config()
    base = synth.sweep(cfg, [3, 4], broken=[4])
    now = [dict(r, verdict="boot-fail", answer="") if r["residue"] == 4 else r
           for r in synth.sweep(cfg, [3, 4])]
    block = gate_block(base, now, source="base.jsonl")
    from harness.records.phase_record import PhaseRecord
    result = SimpleNamespace(exit_code=1, not_ok=[PhaseRecord.from_dict(r) for r in now
                                                  if r["verdict"] != "ok"],
                             run_id="r", report_path=None, records_path="r.jsonl",
                             manifest={"baseline": block})
    msg = failure_message(result, ["--residues", "3,4"])
    assert "gate: 1 regression(s) against base.jsonl" in msg
    assert "regressed: " in msg and "residue 4 cold: ok -> boot-fail" in msg
    assert "coverage: " in msg and "residue 4 self-hit: broken in the baseline, boot-fail now" in msg


@pytest.mark.e2e   # two real sweeps of the fake engine, the second through the plugin
def test_with_a_baseline_a_run_that_never_boots_fails_the_test(tmp_path, tok_dir, cli):
    """Issue 33 item 5 through the plugin: the baseline's residue 4 self-hit is known
    broken, and now no server boots. The test fails, naming the lost cell."""
    from tests.conftest import fake_cmd
    flags = ["--engine", "cmd", "--model", str(tok_dir), "--context", "800",
             "--residues", "3,4"]
    base = cli.sweep(*flags, "--server-cmd", fake_cmd(tok_dir, "--break-residue", "4"),
                     out="base", rc=1)
    assert base.returncode == 1
    test_file = tmp_path / "test_gated.py"
    argv = [*flags, "--server-cmd", fake_cmd(tok_dir, "--boot-fail", "'no GPU memory'"),
            "--baseline", str(cli.results_file("base"))]
    test_file.write_text(f"def test_gated(residue_sweep):\n    residue_sweep(*{argv!r})\n")
    r = pytest_file(test_file, tmp_path / "out", timeout=180)
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout[-3000:]
    assert "residue 4 self-hit: broken in the baseline, boot-fail now" in r.stdout
    assert "no cell of this run was judged" in r.stdout


def test_the_plugin_honours_dry_run(tmp_path):
    """Issue 33 item 9: a test whose sweep says ``--dry-run`` shows the plan and passes
    without booting a server or writing a record."""
    test = tmp_path / "test_dry.py"
    test.write_text("import pytest\n\n"
                    "@pytest.mark.residue_sweep('--residues', '3-4', '--dry-run')\n"
                    "def test_plan():\n    pass\n")
    out = tmp_path / "out"
    r = pytest_file(test, out, "-s")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "nothing started (--dry-run)" in r.stdout and "1 passed" in r.stdout
    assert not list(out.glob("*.jsonl")) and not list(out.glob("*.servers.json"))
