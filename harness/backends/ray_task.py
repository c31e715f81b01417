"""What runs on a Ray node for ``--backend ray`` (``ray.py`` is the driver's side): one
data point as one task, the same ``PointRunner.run_fresh`` as a local slot, in the slot Ray
gave it (its GPUs, or the worker process for a CPU engine); the node's label in the records;
the server logs shipped back; and the watchdog that ends this worker's servers the moment
the worker is gone (a forced cancel SIGKILLs it)."""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from ..run.plan import Point
from ..run.point import RunnerSpec
from ..serve.client import shared_http
from ..serve.engines import adapter_class
from ..serve.orphans import OWNER_ENV, owner_token
from ..serve.slots import Slot
from ..server_pool import ServerGroup
from ..settings.sweep_options import SweepOptions

__all__ = ["run_point_task", "gpu_engine", "node_label", "one_line", "Watchdog", "LOG_TAIL_BYTES"]

LOG_TAIL_BYTES = 1 << 20     # per server log shipped back to the driver


def gpu_engine(opts: SweepOptions) -> bool:
    """A point of this sweep needs one GPU: vLLM always, ``cmd`` when given ``--gpus``."""
    return adapter_class(opts.serving.engine).needs_gpu or any(s.gpu is not None for s in opts.running.slots)


def node_label(hostname: str, ip: str, node_id: str) -> str:
    """The ``node`` of a record: nodes on one machine share hostname and IP, so the Ray
    node id (first 8 hex) is part of it."""
    return f"{hostname}/{ip}/{node_id[:8]}"


def one_line(err: BaseException, limit: int = 240) -> str:
    text = " ".join(str(err).split()) or repr(err)
    return f"{type(err).__name__}: {text[:limit]}"


def run_point_task(shared: tuple, point: Point, attempt: int, tracker) -> dict[str, Any]:
    """One data point on this node: the same ``PointRunner.run_fresh`` as local slots."""
    import ray
    spec: RunnerSpec = shared
    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    label = node_label(socket.gethostname(), ray.util.get_node_ip_address(), node_id)
    slot = _slot_here(ctx, node_id, gpu_engine(spec.opts))
    if tracker is not None:
        try:  # where this attempt runs, so a lost node can be named and avoided
            ray.get(tracker.started.remote(point.key, attempt, node_id, label, slot.id),
                    timeout=30)
        except Exception as e:
            print(f"residue-lab: could not report the start of residue {point.residue} "
                  f"to the driver: {one_line(e)}", file=sys.stderr)
    servers = Watchdog.install()
    logs_dir = Path(tempfile.mkdtemp(prefix="residue-lab-ray-"))
    try:
        result = asyncio.run(_run_point(spec, logs_dir, label, point, slot, servers))
        logs = {p.name: _tail(p) for p in sorted(logs_dir.iterdir()) if p.is_file()}
    finally:
        for p in logs_dir.glob("*"):
            try:
                p.unlink()
            except OSError:
                pass
        try:
            logs_dir.rmdir()
        except OSError:
            pass
    # the process boundary: records cross it as written (as_dict), and the driver's side
    # rebuilds them (ray.RayBackend._write: PhaseRecord.from_dict)
    return {"records": [r.as_dict() for r in result.records], "timing": result.timing,
            "node": label,
            "node_id": node_id, "slot": slot.id, "logs": logs}


async def _run_point(spec: RunnerSpec, logs_dir: Path, label: str, point: Point, slot: Slot,
                     servers: ServerGroup):
    http = shared_http()
    try:
        return await spec.make(logs_dir, http, node=label,
                               launcher=servers.launcher()).run_fresh(point, slot)
    finally:
        await http.aclose()


def _slot_here(ctx, node_id: str, gpu: bool) -> Slot:
    """Slot id = node (8 hex) + the slot's kind and number, ``3590ecc1.gpu3``; for a GPU,
    the id Ray assigned (Ray has already set CUDA_VISIBLE_DEVICES of this worker to it).
    No ``@``: reports neutralise @mentions."""
    short = node_id[:8]
    if gpu:
        ids = ctx.get_accelerator_ids().get("GPU") or \
            [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        gpus = ",".join(str(g) for g in ids)
        return Slot(f"{short}.gpu{gpus.replace(',', '+')}", gpu=gpus or None)
    # Ray numbers no CPU slots; the worker process is the slot (it runs one point at a time).
    return Slot(f"{short}.cpu{os.getpid()}")


def _tail(path: Path) -> str:
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if size > LOG_TAIL_BYTES:
                fh.seek(size - LOG_TAIL_BYTES)
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if size > LOG_TAIL_BYTES:
        text = f"[... first {size - LOG_TAIL_BYTES} bytes not shipped from the node ...]\n" + text
    return text


class Watchdog:
    """One ``_reaper.py`` per Ray worker process; every server this worker starts is
    registered with it the moment it is spawned.

    ``install`` returns the point's ``ServerGroup`` with the watchdog as its observer
    (told right after every spawn and after every completed stop); the point's runner
    starts its servers through that group, so no per-point code is duplicated or wrapped."""

    _lock = threading.Lock()
    _proc: subprocess.Popen | None = None

    @classmethod
    def install(cls) -> ServerGroup:
        """The reaper of this worker process (started once), and a group of servers it
        watches."""
        with cls._lock:
            if cls._proc is None or cls._proc.poll() is not None:
                # --environ: the worker's servers carry its token (harness.serve.orphans), so
                # one spawned in the instant before its registration is ended too
                cls._proc = subprocess.Popen(
                    [sys.executable, str(Path(__file__).with_name("_reaper.py")),
                     "--environ", f"{OWNER_ENV}={owner_token()}"],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        return ServerGroup([cls._on_server])

    @classmethod
    def _on_server(cls, event: str, server) -> None:
        # a server's pid is its process group id: servers start in a session of their own
        if server.proc is not None:
            cls._send(f"{'+' if event == 'started' else '-'}{server.proc.pid}")

    @classmethod
    def _send(cls, line: str) -> None:
        proc = cls._proc
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

