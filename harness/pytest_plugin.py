"""The pytest plugin: residue sweeps as test items (``pytest11`` entry point; docs/pytest.md).

    def test_full_graphs(residue_sweep):
        residue_sweep("--cudagraph", "FULL_AND_PIECEWISE", "--residues", "3-5")

    @pytest.mark.residue_sweep("--cudagraph", "PIECEWISE", "--residues", "3-5")
    def test_piecewise():
        pass

    @pytest.mark.parametrize("flags", configurations("--patches none,all"))
    def test_each(residue_sweep, flags):
        residue_sweep(*flags, "--residues", "3-5")

A sweep runs in-process through the Python API (``harness.Sweep``) with the flags
``sweep`` takes; a sweep whose exit code is not 0 fails the test with the report's
non-ok cells as the assertion message (one line per cell: residue, phase, verdict, why,
and the command that reruns it). ``configurations`` turns comma lists into one
``pytest.param`` per configuration (``residue_blocks`` per block of residues), so
``-k``, ``--lf`` and JUnit see one item each and pytest-xdist spreads them over workers:
each worker runs its servers on one slot (``--slots 1``) or, with ``--residue-gpus``, on
the GPU its worker id picks. Records and reports go to ``--residue-out`` (default: a
folder in pytest's basetemp); ``--residue-args`` adds flags to every sweep (``--engine vllm
--model DIR``: the same tests against a vLLM build).
"""
from __future__ import annotations

import itertools
import os
import shlex
from pathlib import Path
from typing import Any, Sequence

import pytest

from .errors import ExitCode, HarnessError

__all__ = ["ResidueSweepFailed", "configurations", "residue_blocks", "failure_message",
           "sweep_argv", "worker_slot_flags"]

_MARK = "residue_sweep"


class ResidueSweepFailed(HarnessError, AssertionError):
    """A sweep that did not pass: its message is the report's non-ok cells. An
    ``AssertionError`` too, the failure a test reports."""

    exit_code = ExitCode.NOT_OK


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("residue-lab", "residue sweeps (residue-lab)")
    # Every option is --residue-*: a plugin that loads in every pytest run of an
    # environment must not take a name a project's own conftest may add (--out did).
    group.addoption("--residue-out", dest="residue_out", metavar="DIR", default=None,
                    help="residue-lab: where every sweep's records and report go "
                    "(default: residue-lab/ in pytest's basetemp)")
    group.addoption("--residue-args", dest="residue_args", metavar="FLAGS", default="",
                    help="residue-lab: sweep flags added to every sweep, e.g. "
                    "\"--engine vllm --model /models/x\"")
    group.addoption("--residue-gpus", dest="residue_gpus", metavar="LIST", default=None,
                    help="residue-lab: GPU ids; pytest-xdist worker gwN sweeps on the Nth "
                    "(modulo the list), a run without xdist on the first")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{_MARK}(*flags): run a residue sweep with these sweep flags as the "
        "test (fails with the report's non-ok cells)")


# -- the items ------------------------------------------------------------------------------
def configurations(matrix: str | Sequence[str], *, ids: Sequence[str] | None = None) -> list:
    """One ``pytest.param(flags)`` per configuration of a matrix written as ``sweep``
    takes it: ``"--cudagraph FULL_AND_PIECEWISE,PIECEWISE --patches none,all"`` gives
    four, in the order ``sweep`` would run them, each id the values that vary
    (``FULL_AND_PIECEWISE-none``)."""
    from .settings.flags import FLAGS
    argv = shlex.split(matrix) if isinstance(matrix, str) else list(matrix)
    names = {f.name for f in FLAGS}   # the sweep's flag table, not a scan of the tokens
    pairs = []
    for flag, value in zip(argv[::2], argv[1::2]):
        if flag not in names:
            raise ValueError(f"configurations: expected --flag VALUE pairs of sweep flags, "
                             f"got {flag!r}")
        pairs.append((flag, [v for v in value.split(",") if v]))
    if len(argv) % 2:
        raise ValueError(f"configurations: {argv[-1]!r} has no value")
    out = []
    for combo in itertools.product(*(values for _, values in pairs)):
        flags = [x for (flag, _), v in zip(pairs, combo) for x in (flag, v)]
        varying = [v for (_, values), v in zip(pairs, combo) if len(values) > 1]
        out.append(pytest.param(flags, id="-".join(varying) or "default"))
    if ids is not None:
        out = [pytest.param(p.values[0], id=i) for p, i in zip(out, ids)]
    return out


def residue_blocks(size: int, modulus: int = 128) -> list:
    """One ``pytest.param(["--residues", "A-B"])`` per block of ``size`` residues."""
    return [pytest.param(["--residues", f"{a}-{min(a + size, modulus) - 1}"],
                         id=f"r{a:03d}-{min(a + size, modulus) - 1:03d}")
            for a in range(0, modulus, size)]


# -- running a sweep --------------------------------------------------------------------------
def worker_slot_flags(flags: Sequence[str], worker: str | None, gpus: str | None) -> list[str]:
    """Where this worker's servers run, unless ``flags`` say so: the GPU its xdist worker
    id picks from ``gpus``, else one CPU slot per worker (workers are the parallelism)."""
    if {"--slots", "--gpus", "--url"} & set(_written(flags)):
        return []
    index = int(worker[2:]) if worker and worker.startswith("gw") and worker[2:].isdigit() else 0
    if gpus:
        ids = [g for g in gpus.split(",") if g.strip()]
        return ["--gpus", ids[index % len(ids)].strip()]
    return ["--slots", "1"] if worker else []


def sweep_argv(flags: Sequence[str], config: pytest.Config, out: Path) -> list[str]:
    """The full ``sweep`` argv of one test's sweep."""
    argv = [*shlex.split(config.getoption("residue_args") or ""), *map(str, flags)]
    argv += worker_slot_flags(argv, os.environ.get("PYTEST_XDIST_WORKER"),
                              config.getoption("residue_gpus"))
    if "--out" not in _written(argv):
        argv += ["--out", str(out)]
    return argv + ["--no-progress"]


def _written(flags: Sequence[str]) -> dict[str, Any]:
    """The sweep flags ``flags`` write, read by the sweep's own parser (no scan of the
    tokens here); flags it refuses write nothing here: the sweep says why when it runs."""
    from .serve.serve_line import vllm_spellings
    from .settings.flag_manifest import explicit_flags
    try:
        return explicit_flags(vllm_spellings([str(f) for f in flags]))
    except HarnessError:
        return {}


def failure_message(result: Any, argv: Sequence[str]) -> str:
    """The report's non-ok cells, one line each, with where the report is; with
    ``--baseline``, then each regressed and lost cell the gate failed on."""
    bad = sorted(result.not_ok, key=lambda r: (str(r.config_label), r.residue or 0,
                                               str(r.phase)))
    head = (f"residue sweep not ok (exit {int(result.exit_code)}): {len(bad)} cell(s) not ok; "
            f"run {result.run_id}, report {result.report_path or result.records_path}")
    lines = [head]
    for label in dict.fromkeys(str(r.config_label) for r in bad):
        lines.append(f"  {label}:")
        for r in (r for r in bad if str(r.config_label) == label):
            cached = ""
            if r.cached_tokens is not None:
                cached = f" (cached {r.cached_tokens}, tail {r.computed_tail})"
            lines.append(f"    residue {r.residue} {r.phase}: {r.verdict}"
                         f"{cached}: {str(r.reason or '')[:200]}")
            if r.history is not None:   # --history: what ran before, and its proof
                lines.append(f"      history {r.history.name}: {r.history.reason}")
            lines.append(f"      rerun: {r.rerun}")
    from .records.gate_block import BaselineBlock
    from .records.manifest import as_manifest
    manifest = getattr(result, "manifest", None)   # a RunManifest, or a manifest as read
    block = as_manifest(manifest).baseline if manifest else None
    if isinstance(block, BaselineBlock):   # --baseline: the cells the gate failed on, by name
        from .publish.gate import gate_lines
        lines += gate_lines(block)
    elif not bad:
        lines.append(f"  no cell is not ok; the gate failed: sweep {shlex.join(argv)}")
    return "\n".join(lines)


def _run(argv: list[str]):
    """One sweep in this process through the Python API (``harness.Sweep``); a usage
    error fails the test with its one line. SIGINT stays pytest's (``signals=False``):
    an interrupted sweep still stops its servers (the session's ``finally``)."""
    from harness import Sweep, options_from_argv
    try:
        return Sweep(options_from_argv(argv), signals=False).run()
    except HarnessError as e:
        if e.exit_code is None:   # handled where it is raised: here, a harness bug
            raise
        pytest.fail(f"sweep {shlex.join(argv)}: {e.prefix}: {e}", pytrace=False)


class _Sweeper:
    """The ``residue_sweep`` fixture: call it with sweep flags."""

    def __init__(self, request: pytest.FixtureRequest, out: Path):
        self.request = request
        self.out = out
        self.results: list[Any] = []

    def __call__(self, *flags: str, check: bool = True):
        __tracebackhide__ = True   # the failure points at the test's own line
        argv = sweep_argv(flags, self.request.config, self.out)
        result = _run(argv)
        self.results.append(result)
        if result.dry_run:   # --dry-run: the plan on the test's output, nothing started
            print(result.report_markdown)
            return result
        node = self.request.node
        node.user_properties.append(("residue_run", result.run_id))
        node.user_properties.append(("residue_report", str(result.report_path or "")))
        if check and int(result.exit_code) != 0:
            raise ResidueSweepFailed(failure_message(result, argv))
        return result


def _out_dir(config: pytest.Config, factory: pytest.TempPathFactory) -> Path:
    given = config.getoption("residue_out")
    return Path(given) if given else factory.getbasetemp() / "residue-lab"


@pytest.fixture
def residue_sweep(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """``residue_sweep(*flags, check=True) -> RunResult``: one sweep, failing the test
    with the report's non-ok cells unless every cell is ok."""
    return _Sweeper(request, _out_dir(request.config, tmp_path_factory))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``residue_sweep`` gets the fixture even when it does not ask for it."""
    for item in items:
        names = getattr(item, "fixturenames", None)
        if item.get_closest_marker(_MARK) is not None and names is not None \
                and "residue_sweep" not in names:
            names.append("residue_sweep")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """A test marked ``residue_sweep(*flags)`` runs that sweep first (in its call phase,
    so a failure is the test's failure, not a setup error), then its body."""
    __tracebackhide__ = True
    mark = pyfuncitem.get_closest_marker(_MARK)
    if mark is not None:
        pyfuncitem.funcargs["residue_sweep"](*mark.args, **mark.kwargs)
    return None
