"""``sweep --backend ray`` end to end on a real two-node Ray cluster on this machine
(head + a second worker node, each a ``ray start`` process with its own ports), through
the real CLI, against the lab engine:

1. Ctrl-C while both nodes run a server: exit 130, every server on every node dies;
2. ``--resume`` of that run on the cluster, and one worker node killed mid-point: no
   point lost, the lost one retried on the other node, verdicts identical to the local
   backend's for the same sweep, records from both nodes;

   "mid-point" by construction, not by timing: each node's lab servers get their own
   ``RESIDUE_LAB_TEST_HOLD_DIR`` (engine/lab/hold.py), and an armed node's chosen server
   holds its first chat request and says so in ``holding``. The test interrupts (1) and
   kills the node (2) only once a point is held there, however fast the sweep runs;
3. a Ray worker SIGKILLed mid-point (the OOM killer) leaves no server: its watchdog
   kills it;
4. a GPU engine (``--engine cmd --gpus``, the fake engine) claims one GPU per point: the
   head declares two GPUs (Ray assigns declared ids whether or not they exist), and each
   server's CUDA_VISIBLE_DEVICES is the id Ray assigned, which the slot names; a GPU
   group (the lab, ``--gpus 0+1``) claims both per point, and its records show the group
   and the TP size the lab was given;
5. nothing left running: no server, no Ray process of this cluster.

One test function on purpose: one cluster per test run (2 cores), and the scenarios
share it (pytest-xdist cannot split them across workers).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine.lab.hold import HOLD_DIR_ENV
from tests.conftest import FAKE_ENGINE, FIXTURES, ROOT, processes_mentioning
from tests.ray.cluster import LocalRayCluster
from tests.ray.conftest import ray_or_skip

# A two-node Ray cluster on this machine: about a minute idle, more under load.
pytestmark = pytest.mark.slow
LAB_MODEL = ROOT / "engine" / "lab" / "model"
# Unpatched, FULL graphs: the lab's Bug B breaks residue 4 on the self-hit (k=3).
SWEEP = ["--residues", "0-15", "--patches", "none", "--cudagraph", "FULL_AND_PIECEWISE",
         "--no-progress"]


def _argv(tmp: Path, model: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "harness", "--model", str(model), *SWEEP,
            "--out", str(tmp / "results"), "--reports-dir", str(tmp / "reports"), *extra]


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return out


def _records_in(results_dir: Path) -> list[dict]:
    """The records of the one run writing into ``results_dir`` (none before it starts)."""
    return [r for f in results_dir.glob("*.jsonl") for r in _records(f)]


def _servers_on(node, marker: str) -> list[psutil.Process]:
    out = []
    for p in node.tree():
        try:
            if marker in " ".join(p.cmdline()) and "engine.lab" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def _arm(hold_dir: Path, passing: int = 0) -> None:
    """The node's servers after the first ``passing`` ones hold (one of them, the next)."""
    hold_dir.mkdir()
    if passing:
        (hold_dir / "pass").write_text(str(passing))


def _holding(hold_dir: Path) -> dict | None:
    """What the held server wrote (its pid), once a server of that node is holding."""
    f = hold_dir / "holding"
    return json.loads(f.read_text()) if f.exists() else None


def _assert_held_on(node, hold_dir: Path, marker: str) -> None:
    """The held request is in a lab server of this sweep on that node: a point in progress."""
    held = _holding(hold_dir)
    assert held and held["pid"] in {p.pid for p in _servers_on(node, marker)}, (
        held, node.name)


def _without(name: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != name}


def _node_id8(node) -> str:
    raylet = node.raylet()
    assert raylet is not None
    arg = next(a for a in raylet.cmdline() if a.startswith("--node_id="))
    return arg.split("=", 1)[1][:8]


def _wait(cond, timeout: float, what: str, poll: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _verdicts(recs: list[dict]) -> dict[tuple, str]:
    return {(r["residue"], r["phase"]): r["verdict"] for r in recs}


def test_sweep_on_a_two_node_ray_cluster(tmp_path):
    ray_or_skip()
    # The servers' command lines carry this test's tmp dir (--model), so leftovers are
    # findable by it and nobody else's processes are touched.
    model = tmp_path / "model"
    shutil.copytree(LAB_MODEL, model)
    marker = str(tmp_path)
    cluster = LocalRayCluster(slots_per_node=1)
    t0 = time.monotonic()

    def mark(what: str) -> None:  # where the time goes (shown with -rP or on failure)
        print(f"{time.monotonic() - t0:6.1f}s  {what}", flush=True)
    # Each node's lab servers see their own hold dir (engine/lab/hold.py): armed when it
    # exists, so the test decides which point of which node is in progress, and for how long.
    holds = {"head": tmp_path / "hold-head", "worker": tmp_path / "hold-worker"}
    try:
        # The head boots, then the worker (it joins at the address the head picked and
        # reports once up); meanwhile the local backend runs the same sweep for the
        # reference verdicts.
        head = cluster.start_head(gpus=2,  # declared, not real: see scenario 4
                                  env={HOLD_DIR_ENV: str(holds["head"])})
        local_dir = tmp_path / "local"
        local = subprocess.Popen(_argv(local_dir, model, "--slots", "2"), cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=_without(HOLD_DIR_ENV))
        try:
            worker = cluster.add_worker(env={HOLD_DIR_ENV: str(holds["worker"])})
            _, local_err = local.communicate(timeout=120)
        finally:
            if local.poll() is None:
                local.kill()
                local.wait()
        assert local.returncode == 1, local_err[-3000:]
        local_files = list((local_dir / "results").glob("*.jsonl"))
        expected = _verdicts(_records(local_files[0]))
        mark("local sweep done")
        assert len(expected) == 32 and expected[(4, "self-hit")] == "broken"
        cluster.wait_started(head)
        cluster.wait_started(worker)
        head_id, worker_id = _node_id8(head), _node_id8(worker)
        mark("cluster up")

        # -- 1. Ctrl-C with a server running on each node ----------------------------
        # The head's first point holds; the worker finishes one point and holds its
        # second: both nodes are mid-point, one point is recorded, and the sweep cannot
        # end before the Ctrl-C however fast it runs.
        _arm(holds["head"])
        _arm(holds["worker"], passing=1)
        ray_dir = tmp_path / "ray"
        argv = _argv(ray_dir, model, "--backend", "ray", "--ray-address", cluster.address)
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            _wait(lambda: proc.poll() is not None or (
                _holding(holds["head"]) and _holding(holds["worker"]) and any(
                    r["node"].endswith(worker_id) for r in _records_in(ray_dir / "results"))),
                  90,  # under the sweep's 120 s request timeout: the held head point waits
                  "a held point on both nodes and a point done on the worker")
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            _assert_held_on(head, holds["head"], marker)
            _assert_held_on(worker, holds["worker"], marker)
            mark("both nodes mid-point: Ctrl-C")
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            mark("interrupted sweep exited")
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err[-3000:]
        assert "sweep --resume" in err
        left = _wait_gone(marker, 20)
        assert not left, f"servers survived Ctrl-C: {left}"
        mark("no server left")
        for d in holds.values():  # disarmed
            shutil.rmtree(d)
        run_id = next((ray_dir / "results").glob("*.manifest.json")).name.split(".")[0]
        results = ray_dir / "results" / f"{run_id}.jsonl"
        before = _records(results)
        # exactly the worker's first point: the two held points were lost to the Ctrl-C
        assert len({r["residue"] for r in before}) == 1 and len(before) == 2, before
        assert all(r["node"].endswith(worker_id) for r in before), before

        # -- 2. resume on the cluster; the worker node dies mid-point ----------------
        # The worker's first point of the resumed run holds: the node is killed while
        # that point is surely unfinished.
        _arm(holds["worker"])
        resume = subprocess.Popen([sys.executable, "-m", "harness", "--resume", run_id,
                                   "--out", str(ray_dir / "results"),
                                   "--reports-dir", str(ray_dir / "reports"), "--no-progress"],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        try:
            _wait(lambda: resume.poll() is not None or _holding(holds["worker"]), 90,
                  "a point held on the worker node")
            assert resume.poll() is None, resume.communicate()[1][-3000:]
            _assert_held_on(worker, holds["worker"], marker)
            lost_at = time.monotonic()
            mark("resumed; worker node killed mid-point")
            cluster.kill_node(worker)
            out, err = resume.communicate(timeout=120)
            mark("resumed sweep exited")
        finally:
            if resume.poll() is None:
                resume.kill()
        assert resume.returncode == 1, err[-3000:]  # residue 4 broken, as locally

        recs = _records(results)
        keys = [(r["residue"], r["phase"]) for r in recs]
        assert len(keys) == len(set(keys)) == 32, "a point lost or recorded twice"
        assert _verdicts(recs) == expected, "verdicts differ from the local backend"
        nodes = {r["node"].rsplit("/", 1)[-1] for r in recs}
        assert nodes == {head_id, worker_id}, nodes
        retried = [r for r in recs if r.get("attempt") == 2]
        # one point was on the worker when it died (one slot per node): it alone is retried
        assert len({r["residue"] for r in retried}) == 1 and len(retried) == 2, retried
        for r in retried:
            assert worker_id in r["infra_retry"] and "lost mid-point" in r["infra_retry"]
            assert r["node"].endswith(head_id)  # retried away from the dead node
        assert not [r for r in recs if r["verdict"] == "infra"]
        assert time.monotonic() - lost_at < 100
        manifest = json.loads((ray_dir / "results" / f"{run_id}.manifest.json").read_text())
        assert manifest["exit_code"] == 1 and manifest["interrupted"] is False
        # every server log came back to the driver's results dir
        logs = list((ray_dir / "results" / f"{run_id}.logs").glob("*.log"))
        # <config>-r<residue>-<node8>.<slot>-<port>.log
        assert {p.name.split("-")[2].split(".")[0] for p in logs} == {head_id, worker_id}
        assert not _wait_gone(marker, 20), "servers left after the sweep"

        # -- 3. a worker SIGKILLed mid-point (OOM killer) takes its server with it ------
        probe = subprocess.run([sys.executable, "-m", "tests.ray.worker_kill_probe",
                                cluster.address, f"{marker}/probe-server"], cwd=ROOT,
                               capture_output=True, text=True, timeout=120)
        assert probe.returncode == 0, probe.stdout + probe.stderr[-3000:]
        outcome = json.loads(probe.stdout.strip().splitlines()[-1])
        assert outcome == {"error": "WorkerCrashedError", "left": []}, outcome
        mark("worker SIGKILL probe done")

        # -- 4. a GPU engine claims one GPU per point; the server sees the GPU Ray gave ----
        tok = tmp_path / "tok"
        shutil.copytree(FIXTURES / "tokenizer", tok)
        server = (f"sh -c 'echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; exec "
                  f"{sys.executable} {FAKE_ENGINE} --port {{port}} --model {tok}'")
        gpu_dir = tmp_path / "gpu"
        gpu = subprocess.run(
            [sys.executable, "-m", "harness", "--engine", "cmd", "--server-cmd", server,
             "--gpus", "0", "--model", str(tok), "--context", "800", "--residues", "0-5",
             "--backend", "ray", "--ray-address", cluster.address, "--no-progress",
             "--out", str(gpu_dir / "results"), "--reports-dir", str(gpu_dir / "reports")],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert gpu.returncode == 0, gpu.stderr[-3000:]
        assert "slot(s) of 'GPU'; one GPU per data point" in gpu.stderr
        grecs = _records(next((gpu_dir / "results").glob("*.jsonl")))
        assert len(grecs) == 12 and {r["verdict"] for r in grecs} == {"ok"}
        assert {r["slot"] for r in grecs} == {f"{head_id}.gpu0", f"{head_id}.gpu1"}
        glogs = list((gpu_dir / "results").glob("*.logs/*.log"))
        assert len(glogs) == 6
        for log in glogs:  # <config>-r<residue>-<node8>.gpu<N>-<port>.log
            gpu_id = log.name.split("-")[2].split(".gpu")[1]
            assert f"CUDA_VISIBLE_DEVICES={gpu_id}\n" in log.read_text()
        mark("GPU claim sweep done")

        # -- 4b. a GPU group: one server across the head's two GPUs, TP 2 ---------------
        group_dir = tmp_path / "group"
        group = subprocess.run(
            _argv(group_dir, model, "--gpus", "0+1", "--residues", "3,4", "--backend", "ray",
                  "--ray-address", cluster.address),
            cwd=ROOT, capture_output=True, text=True, timeout=120, env=_without(HOLD_DIR_ENV))
        assert group.returncode == 1, group.stderr[-3000:]   # residue 4 broken, as above
        assert "1 slot(s) of 'GPU'; 2 GPUs (one server across them) per data point" \
            in group.stderr
        trecs = _records(next((group_dir / "results").glob("*.jsonl")))
        assert _verdicts(trecs) == {k: v for k, v in expected.items() if k[0] in (3, 4)}
        assert {r["slot"] for r in trecs} == {f"{head_id}.gpu0+1"}
        assert {(r["config"]["tensor_parallel_size"], r["config"]["visible_devices"])
                for r in trecs} == {(2, "0,1")}
        mark("GPU group sweep done")
    finally:
        leftovers = [p.pid for p in processes_mentioning(marker)]
        for p in processes_mentioning(marker):
            p.kill()
        killed = cluster.stop()
        mark("cluster stopped")
    assert not leftovers, f"server processes left behind: {leftovers}"
    assert not [p for p in cluster.all_processes()], "Ray processes of the test cluster survived"
    del killed  # SIGKILLed after the grace period: allowed (Ray's own agents are slow)


def _wait_gone(marker: str, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = [p.pid for p in processes_mentioning(marker)
                if "engine.lab" in " ".join(_cmdline(p))]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.NoSuchProcess:
        return []
