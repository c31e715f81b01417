"""A throwaway Ray cluster on this machine: a head and worker nodes, each its own
``ray start --block`` process, under a temp dir of its own.

Every port is Ray's own pick: each one is passed as 0, which Ray 2.60's components bind
themselves (and report to the node through their port files); the head's GCS port is read
from the address file ``ray start`` writes once the head is up. Ports chosen here and
released before Ray bound them collided (issue 33 item 10: two ``free_port()`` calls gave
one node the same number twice, and Ray refused it), and any other process could take one
in between; a port nobody chose ahead cannot collide.

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


# Ray's components that take a port: 0 = bind any free port and report it (the worker
# ports: --min/--max-worker-port 0, "any"). The Ray client server is the one component
# that cannot take 0 (``ray start`` sets 10001 where ray[client] is installed, and refuses
# a port below 1024): START_HOOK turns it off, and nothing here connects through it.
OWN_PORTS = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--metrics-export-port",
             "--runtime-env-agent-port")


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    out: Path
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


def no_client_server(ray_params, head: bool) -> None:
    """``RAY_START_HOOK``: ``ray start`` calls it with its parameters before it starts the
    node; without a port the head starts no Ray client server (node.py)."""
    ray_params.ray_client_server_port = None


START_HOOK = {"RAY_START_HOOK": f"{__name__}.no_client_server"}


class LocalRayCluster:
    def __init__(self, *, slots_per_node: int = 1, resource: str = "lab_slot"):
        # Short: Ray's unix socket paths live under it (108-byte limit).
        self.root = Path(tempfile.mkdtemp(prefix="rl-ray-", dir="/tmp"))
        self.slots = slots_per_node
        self.resource = resource
        self.nodes: list[Node] = []
        root = str(Path(__file__).resolve().parents[2])   # the hook's module: this file
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_DISABLE_DOCKER_CPU_WARNING": "1", "PYTHONPATH": path, **START_HOOK}

    def _node_args(self, gpus: int = 0) -> list[str]:
        """``gpus``: GPUs this node declares. Ray assigns declared GPU ids to tasks and
        sets their CUDA_VISIBLE_DEVICES whether or not the machine has them, which is
        enough to test how a GPU sweep claims them."""
        ports = [a for flag in OWN_PORTS for a in (flag, "0")]
        return ["--node-ip-address", "127.0.0.1", "--num-cpus", str(self.slots + gpus),
                "--num-gpus", str(gpus),
                "--resources", json.dumps({self.resource: self.slots}),
                "--object-store-memory", str(80 * 1024 * 1024), *ports,
                "--min-worker-port", "0", "--max-worker-port", "0",
                "--disable-usage-stats", "--block"]

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None) -> Node:
        out = self.root / f"{name}.out"
        # The node's environment is its workers' and so its servers' (a per-node test knob)
        proc = subprocess.Popen(argv, stdout=open(out, "w"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**self.env, **(env or {})},
                                start_new_session=True,
                                preexec_fn=_term_with_parent)
        node = Node(name, proc, out)
        self.nodes.append(node)
        return node

    def head_argv(self, gpus: int = 0) -> list[str]:
        """The head, with no dashboard (and no Ray client server: START_HOOK)."""
        return [ray_cli(), "start", "--head", "--port", "0", "--temp-dir", str(self.root),
                "--include-dashboard", "false", *self._node_args(gpus)]

    def worker_argv(self, address: str) -> list[str]:
        return [ray_cli(), "start", "--address", address, *self._node_args()]

    def start_head(self, gpus: int = 0, env: dict[str, str] | None = None) -> Node:
        return self._start("head", self.head_argv(gpus), env)

    @property
    def address(self) -> str:
        """The head's GCS address, once the head is up (waits for it): ``ray start`` writes
        it to ``<temp dir>/ray_current_cluster`` after the node started."""
        head = self.nodes[0]
        self.wait_started(head)
        return self._address_file().read_text().strip()

    def _address_file(self) -> Path:
        return self.root / "ray_current_cluster"

    def add_worker(self, name: str = "worker", env: dict[str, str] | None = None) -> Node:
        """A worker node; it joins the head, so this first waits for the head's address."""
        return self._start(name, self.worker_argv(self.address), env)

    def wait_started(self, node: Node, timeout: float = 90.0) -> None:
        """Until ``ray start`` says the node is up (the head: and its address is written)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = node.out.read_text(errors="replace") if node.out.exists() else ""
            written = node is not self.nodes[0] or self._address_file().exists() and \
                self._address_file().read_text().strip()
            if STARTED in text and written:
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
