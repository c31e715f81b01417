"""Ray backend pieces that need no cluster (most need no Ray at all)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from harness.backends import ray as rb
from harness.settings.configs import parse_slots
from harness.serve.engines import adapter_class
from tests.conftest import ROOT
from tests.conftest import wait_for as _wait_for

REAPER = ROOT / "harness" / "backends" / "_reaper.py"


def _Opts(engine: str, gpus: str | None = None):
    """What task_resources reads of the options: the engine and the slots."""
    return SimpleNamespace(
        serving=SimpleNamespace(engine=engine),
        running=SimpleNamespace(slots=parse_slots(None, gpus, adapter_class(engine).default_slots())))




def test_slot_resources():
    assert rb.task_resources(_Opts("vllm"), {"GPU": 8, "CPU": 64}) == {"num_gpus": 1, "num_cpus": 1}
    assert rb.task_resources(_Opts("cmd", "0,1"), {"GPU": 2}) == {"num_gpus": 1, "num_cpus": 1}
    # --gpus 0,0: two servers per GPU locally, half a GPU per point on Ray
    assert rb.task_resources(_Opts("vllm", "0,0,1,1"), {"GPU": 2}) == {"num_gpus": 0.5, "num_cpus": 1}
    assert rb.task_resources(_Opts("lab"), {"CPU": 4, "lab_slot": 4}) == \
        {"num_cpus": 0, "resources": {"lab_slot": 1}}
    assert rb.task_resources(_Opts("cmd"), {"CPU": 4}) == {"num_cpus": 1}
    # a GPU group: one server across its GPUs claims them all (the lab too: it records them)
    assert rb.task_resources(_Opts("vllm", "0+1,2+3"), {"GPU": 4}) == {"num_gpus": 2, "num_cpus": 1}
    assert rb.task_resources(_Opts("lab", "0+1"), {"GPU": 2}) == {"num_gpus": 2, "num_cpus": 1}
    assert rb.task_resources(_Opts("vllm", "0+1,0+1"), {"GPU": 2}) == {"num_gpus": 1, "num_cpus": 1}


def test_node_label_and_grouping():
    a = rb.node_label("vm", "10.0.0.2", "ab12cd34ef" * 5)
    b = rb.node_label("vm", "10.0.0.2", "0123456789" * 5)
    assert a == "vm/10.0.0.2/ab12cd34" and a != b  # one machine, two nodes
    from harness.records.phase_record import PhaseRecord
    recs = [PhaseRecord.from_dict({"node": n, "verdict": v, "phase": "cold"})
            for n, v in ((a, "ok"), (b, "ok"), (a, "broken"))]
    assert rb.records_by_node(recs) == {b: {"ok": 1}, a: {"ok": 1, "broken": 1}}


def test_node_id_from_a_node_died_message():
    msg = ("Task failed because the node it was running on is dead or unavailable. Node IP: "
           "192.0.2.2, node ID: 3590ecc110c5eea92408b58110cb4dab41698171617b7b5705edc309. This")
    assert rb.node_id_in(RuntimeError(msg)) == "3590ecc110c5eea92408b58110cb4dab41698171617b7b5705edc309"
    assert rb.node_id_in(RuntimeError("The worker died unexpectedly")) is None


def test_reaper_kills_registered_groups_when_its_worker_is_gone():
    """The watchdog a Ray worker leaves behind: EOF on stdin (the worker died, even by
    SIGKILL) -> every registered process group is killed; unregistered ones are not."""
    reaper = subprocess.Popen([sys.executable, str(REAPER)], stdin=subprocess.PIPE,
                              start_new_session=True)
    kept = subprocess.Popen(["sleep", "60"], start_new_session=True)
    victim = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], start_new_session=True)
    try:
        sh = psutil.Process(victim.pid)
        # sh and its two sleeps, one process group, once sh has forked both
        children = _wait_for(lambda: len(sh.children()) == 2 and sh.children(), 10,
                             "sh to start both sleeps")
        group = [sh, *children]
        assert {os.getpgid(p.pid) for p in group} == {victim.pid}
        reaper.stdin.write(f"+{victim.pid}\n+{kept.pid}\n-{kept.pid}\n".encode())
        reaper.stdin.flush()
        reaper.stdin.close()  # what the kernel does when the worker dies
        assert reaper.wait(timeout=10) == 0
        _, alive = psutil.wait_procs(group, timeout=5)
        assert not alive
        assert kept.poll() is None  # stopped normally earlier: not the reaper's business
    finally:
        for p in (kept, victim):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def test_without_ray_the_error_is_one_clear_line(tmp_path):
    """``ray`` not importable: exit 2 and the install hint, no traceback."""
    code = ("import sys, runpy; sys.modules['ray'] = None; "
            "sys.argv = ['sweep'] + sys.argv[1:]; runpy.run_module('harness', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code, "--backend", "ray", "--residues", "3",
                           "--out", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "p"),
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "sweep: error: --backend ray needs the ray extra: pip install 'residue-lab[ray]'")


@pytest.mark.slow
def test_no_cluster_at_the_address_is_one_line_exit_3(tmp_path, ray_module, cli):
    """ray.init blocks for minutes where no cluster answers: the sweep gives up after
    RESIDUE_LAB_RAY_CONNECT_TIMEOUT with one line, and exits (no thread left hanging)."""
    import socket
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    proc = cli.sweep("--backend", "ray", "--ray-address", f"127.0.0.1:{port}", "--residues", "3",
                     out="r", reports="p", timeout=120,
                     env={**os.environ, "RESIDUE_LAB_RAY_CONNECT_TIMEOUT": "3"})
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert time.monotonic() - t0 < 60
    assert "Traceback" not in proc.stderr
    # Ray's own C++ logger ("[2026-12-01 22:56:21,427 W 8410 8493] rpc_client.h:...") runs
    # in its threads and can print after the sweep's line on a loaded machine: the sweep's
    # last line is the last one that is not Ray's.
    ours = [ln for ln in proc.stderr.strip().splitlines()
            if not re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z] \d+ \d+\] ", ln)]
    assert ours[-1].startswith("sweep: cannot run: --backend ray: no Ray cluster answered at")


def test_lost_twice_is_infra_on_every_phase_and_once_is_a_retry_elsewhere(tmp_path, ray_module):
    """The driver's bookkeeping for lost points, without a cluster: the first loss
    resubmits attempt 2 away from the node; the second writes ``infra`` records (one per
    phase) naming both failures, counted like any finished point."""
    from harness.command.cli import build_options, sweep_parser
    from harness.serve.engines import make_adapter
    from harness.run.driver import Driver
    from harness.run.plan import plan_points
    from harness.records.store import ResultStore

    argv = ["--backend", "ray", "--residues", "3", "--phases", "cold,warm,self-hit"]
    opts = build_options(sweep_parser().parse_args(argv), argv)
    adapter = make_adapter(opts.serving.engine, opts.serving.server_cmd)
    store = ResultStore(tmp_path, "run-x")
    sweep = Driver(opts, adapter, store, plan_points(opts, adapter))
    done = []
    sweep.on_point_done = lambda point, recs: done.append((point.residue, len(recs)))

    class Remote:
        def __init__(self):
            self.calls = []

        def options(self, **kw):
            self.calls.append(kw)
            return self

        def remote(self, *args):
            return object()

    run = rb._RayRun(ray_module, sweep)
    run.remote_fn = Remote()
    run.base_options = {"num_cpus": 1, "max_retries": 0}
    run.slot_resource = "CPU"
    where = {"node_id": "a" * 56, "node": "vm/10.0.0.2/aaaaaaaa", "slot": "aaaaaaaa.cpu7"}
    run._avoid_options = lambda node_id: [{"label_selector": {"ray.io/node-id": f"!{node_id}"}}]
    point = sweep.plan.points[0]
    lost = ray_module.exceptions.WorkerCrashedError()

    run._lost(rb._Attempt(point), lost, where)
    (ref, att2), = run.inflight.items()
    assert att2.attempt == 2 and att2.avoid == "a" * 56
    assert "vm/10.0.0.2/aaaaaaaa" in att2.first_failure and "WorkerCrashedError" in att2.first_failure
    assert run.remote_fn.calls[-1]["label_selector"] == {"ray.io/node-id": "!" + "a" * 56}
    assert store.read() == [] and done == []

    where = {"node_id": "b" * 56, "node": "vm/10.0.0.3/bbbbbbbb", "slot": "bbbbbbbb.cpu9"}
    run.inflight.clear()
    run._lost(att2, lost, where)
    store.close()
    recs = store.read()
    assert [r.phase for r in recs] == ["cold", "warm", "self-hit"]
    assert {r.verdict for r in recs} == {"infra"}
    for r in recs:
        assert r.node == "vm/10.0.0.3/bbbbbbbb" and r.slot == "bbbbbbbb.cpu9"
        assert "aaaaaaaa" in r.reason and "bbbbbbbb" in r.reason
        assert r.extra["attempt"] == 2 and r.residue == 3 and r.rerun
    assert done == [(3, 3)] and sweep.counters.verdicts["infra"] == 3
    assert not run.inflight


def test_infra_errors_are_told_from_harness_errors(ray_module):
    exc = ray_module.exceptions
    assert rb.is_infra_error(ray_module, exc.WorkerCrashedError())
    assert rb.is_infra_error(ray_module, exc.NodeDiedError("n" * 56))
    assert not rb.is_infra_error(ray_module, exc.TaskCancelledError())
    assert not rb.is_infra_error(ray_module, ValueError("a harness bug"))
    bug = exc.RayTaskError("_run_point_task", "Traceback ...", ValueError("a harness bug"))
    assert not rb.is_infra_error(ray_module, bug.as_instanceof_cause())
    lost_inside = exc.RayTaskError("_run_point_task", "Traceback ...", exc.WorkerCrashedError())
    assert rb.is_infra_error(ray_module, lost_inside)


def test_by_node_section_only_when_several_nodes():
    from harness.records.phase_record import typed   # the report's sections read PhaseRecords
    from harness.report.nodes import render_nodes
    one = [{"node": "vm", "verdict": "ok", "residue": 1, "config_id": "c", "run_id": "r",
            "phase": "cold"}]   # a record has a phase (the report reads records typed)
    assert render_nodes(typed(one)) == ""
    recs = [{"node": "vm/10.0.0.2/aaaaaaaa", "verdict": "ok", "residue": r, "config_id": "c",
             "run_id": "r", "phase": ph} for r in (1, 2) for ph in ("cold", "self-hit")]
    recs += [{"node": "vm/10.0.0.2/bbbbbbbb", "verdict": v, "residue": 4, "config_id": "c",
              "run_id": "r", "phase": ph, "attempt": 2}
             for v, ph in (("ok", "cold"), ("broken", "self-hit"))]
    md = render_nodes(typed(recs))
    assert md.startswith("## By node")
    row_a = next(ln for ln in md.splitlines() if "aaaaaaaa" in ln)
    row_b = next(ln for ln in md.splitlines() if "bbbbbbbb" in ln)
    assert [c.strip() for c in row_a.strip("|").split("|")][1:] == ["2", "4", "0", "0"]
    assert [c.strip() for c in row_b.strip("|").split("|")][1:] == ["1", "2", "**broken 1**", "1"]


def test_the_test_cluster_picks_no_port_of_its_own(tmp_path):
    """Issue 33 item 10: ``tests/ray/cluster.py`` chose each port by binding port 0 and
    releasing it, so one node got the same number twice ("Ray component metrics_export
    is trying to use a port number 38713 that is used by other components") or another
    process took one first. Every port of both node kinds is now 0 (Ray's components bind
    and report their own); the worker joins at the address the head wrote."""
    from tests.ray.cluster import OWN_PORTS, LocalRayCluster
    cluster = LocalRayCluster()
    try:
        for argv in (cluster.head_argv(gpus=2), cluster.worker_argv("127.0.0.1:1")):
            flags = {a: argv[i + 1] for i, a in enumerate(argv)
                     if a.startswith("--") and a.endswith("port")}
            assert set(OWN_PORTS) <= set(flags), argv
            assert set(flags.values()) == {"0"}, flags
        head = cluster.head_argv()
        assert head[head.index("--port") + 1] == "0"
        assert "--ray-client-server-port" not in head   # not started at all (the hook)
        assert cluster.env["RAY_START_HOOK"] == "tests.ray.cluster.no_client_server"
    finally:
        cluster.root.rmdir()
