"""A throwaway Ray cluster on this machine: a head and worker nodes, each its own
``ray start --block`` process with its own ports, under a temp dir of its own.

Nothing here touches another Ray cluster on the machine (no ``ray stop``, which kills
every Ray process of the user): nodes are stopped through the ``ray start`` processes
this helper started, and whatever survives is killed by pid from a snapshot of their
process trees.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

STARTED = "Ray runtime started"


def ray_cli() -> str:
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    out: Path
    node_manager_port: int
    seen: dict[int, psutil.Process] = field(default_factory=dict)

    def tree(self) -> list[psutil.Process]:
        """The node's processes now (``ray start``, gcs, raylet, agents, workers and
        whatever the workers started), remembered for teardown."""
        try:
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                self.seen.setdefault(p.pid, p)
        except psutil.NoSuchProcess:
            pass
        return [p for p in self.seen.values() if _running(p)]

    def raylet(self) -> psutil.Process | None:
        for p in self.tree():
            try:
                if p.name() == "raylet":
                    return p
            except psutil.NoSuchProcess:
                continue
        return None


class LocalRayCluster:
    def __init__(self, *, slots_per_node: int = 1, resource: str = "lab_slot"):
        # Short: Ray's unix socket paths live under it (108-byte limit).
        self.root = Path(tempfile.mkdtemp(prefix="rl-ray-", dir="/tmp"))
        self.gcs_port = free_port()
        self.address = f"127.0.0.1:{self.gcs_port}"
        self.slots = slots_per_node
        self.resource = resource
        self.nodes: list[Node] = []
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}

    def _node_args(self, gpus: int = 0) -> tuple[list[str], int]:
        """``gpus``: GPUs this node declares. Ray assigns declared GPU ids to tasks and
        sets their CUDA_VISIBLE_DEVICES whether or not the machine has them, which is
        enough to test how a GPU sweep claims them."""
        nm = free_port()
        return ["--node-ip-address", "127.0.0.1", "--num-cpus", str(self.slots + gpus),
                "--num-gpus", str(gpus),
                "--resources", json.dumps({self.resource: self.slots}),
                "--object-store-memory", str(80 * 1024 * 1024),
                "--node-manager-port", str(nm), "--object-manager-port", str(free_port()),
                "--dashboard-agent-listen-port", str(free_port()),
                "--dashboard-agent-grpc-port", str(free_port()),
                "--metrics-export-port", str(free_port()),
                "--runtime-env-agent-port", str(free_port()),
                "--min-worker-port", "0", "--max-worker-port", "0",
                "--disable-usage-stats", "--block"], nm

    def _start(self, name: str, argv: list[str], nm: int,
               env: dict[str, str] | None) -> Node:
        out = self.root / f"{name}.out"
        # The node's environment is its workers' and so its servers' (a per-node test knob)
        proc = subprocess.Popen(argv, stdout=open(out, "w"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**self.env, **(env or {})},
                                start_new_session=True,
                                preexec_fn=_term_with_parent)
        node = Node(name, proc, out, nm)
        self.nodes.append(node)
        return node

    def start_head(self, gpus: int = 0, env: dict[str, str] | None = None) -> Node:
        args, nm = self._node_args(gpus)
        return self._start("head", [ray_cli(), "start", "--head", "--port", str(self.gcs_port),
                                    "--temp-dir", str(self.root), "--include-dashboard", "false",
                                    "--dashboard-port", str(free_port()),
                                    "--ray-client-server-port", str(free_port()), *args], nm,
                           env)

    def add_worker(self, name: str = "worker", env: dict[str, str] | None = None) -> Node:
        args, nm = self._node_args()
        return self._start(name, [ray_cli(), "start", "--address", self.address, *args], nm,
                           env)

    def wait_started(self, node: Node, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = node.out.read_text(errors="replace") if node.out.exists() else ""
            if STARTED in text:
                node.tree()
                return
            if node.proc.poll() is not None:
                raise RuntimeError(f"ray node {node.name} exited {node.proc.returncode}:\n"
                                   + text[-3000:])
            time.sleep(0.1)
        raise TimeoutError(f"ray node {node.name} not started after {timeout}s:\n"
                           + node.out.read_text(errors="replace")[-3000:])

    def kill_node(self, node: Node) -> None:
        """The node is lost: its raylet dies by SIGKILL (its workers and agents follow)."""
        raylet = node.raylet()
        assert raylet is not None, f"no raylet for {node.name}"
        raylet.kill()

    def all_processes(self) -> list[psutil.Process]:
        out = []
        for n in self.nodes:
            out += n.tree()
        return out

    def stop(self) -> list[int]:
        """Stop every node; returns pids that had to be killed after the grace period."""
        procs = self.all_processes()
        for n in self.nodes:
            if n.proc.poll() is None:
                n.proc.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=20)
        killed = []
        for p in alive:
            try:
                p.kill()
                killed.append(p.pid)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=5)
        for n in self.nodes:
            try:
                n.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                n.proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)
        return killed


def _term_with_parent() -> None:
    """A killed test process must not leak its cluster: the node's ``ray start --block``
    gets SIGTERM when the test dies, and stops the node's processes."""
    try:
        import ctypes
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
