"""``sweep --backend ray``: data points as Ray tasks on an existing Ray cluster.

The backend only decides *where* a data point runs. Each point becomes one Ray task that
claims the resources of one slot (``num_gpus=1`` for GPU engines, the custom resource
``lab_slot`` or one CPU for CPU engines), runs ``PointRunner.run_fresh`` on whichever
node Ray picks (fresh server, phases, teardown: the very code the local slots run) and
returns the point's records, timing and server logs (the task's side: ``ray_task.py``).
This process hands them to the
``Driver``, the only writer of the results file, so the JSONL, resume, reports and gate
behave exactly as with the local backend.

Failure semantics (docs/ray.md):

- a node or worker lost mid-point (``NodeDiedError``, ``WorkerCrashedError``, Ray's OOM
  killer, ...) is the infrastructure's fault, not the engine's: the point is retried
  once, away from the node that failed; only if the retry is lost too does the point get
  ``infra`` records (one per phase) whose reason names both nodes and errors;
- an exception raised by the harness code itself inside a task is a bug: the sweep stops
  with it, as the local backend would (records so far are on disk; ``--resume``);
- Ctrl-C (cancellation of ``RayBackend.run``) force-cancels every outstanding task. A forced
  cancel SIGKILLs the Ray worker, so each worker runs a watchdog (``_reaper.py``) that
  kills the worker's server process groups the moment the worker is gone.
"""
from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..settings.sweep_options import SweepOptions
from ..errors import CannotRun, UsageError
from ..run.driver import Driver
from ..run.plan import Point
from ..records.phase_record import PhaseRecord
from ..records.recordkeys import by_node
from .ray_task import Watchdog, gpu_engine, node_label, run_point_task
from .ray_task import one_line as _one_line

__all__ = ["RayBackend", "check_available", "runtime_env", "task_resources", "node_label",
           "records_by_node", "is_infra_error", "node_id_in", "Watchdog", "gpu_engine",
           "INSTALL_HINT", "SLOT_RESOURCE"]

INSTALL_HINT = "--backend ray needs the ray extra: pip install 'residue-lab[ray]'"
# Custom resource a CPU-engine slot claims when the cluster declares it, e.g.
# `ray start --resources '{"lab_slot": 4}'`; otherwise a CPU slot is one Ray CPU.
SLOT_RESOURCE = "lab_slot"
# Ship this checkout's harness/ and engine/ packages to the nodes (runtime_env
# py_modules) so every node runs the driver's code; "0" when residue-lab is installed on
# every node already.
SHIP_CODE_ENV = "RESIDUE_LAB_RAY_SHIP_CODE"
CONNECT_TIMEOUT_ENV = "RESIDUE_LAB_RAY_CONNECT_TIMEOUT"
CONNECT_TIMEOUT_S = 60.0
POLL_S = 0.5                 # ray.wait timeout: how quickly Ctrl-C is noticed
CANCEL_WAIT_S = 15.0         # after Ctrl-C, how long to wait for cancelled tasks to end
MAX_UNSTARTED_RESUBMITS = 3  # a task lost before it started does not use up the retry


# -- entry point -----------------------------------------------------------------------
def check_available():
    """The ``ray`` module, or the one-line usage error (exit 2) when the extra is missing."""
    try:
        import ray
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    if not hasattr(ray, "init"):  # a stray directory named ray/ on sys.path, not Ray
        raise UsageError(INSTALL_HINT)
    return ray


class RayBackend:
    """Data points as Ray tasks; see the module docstring for the failure semantics."""

    name = "ray"

    def __init__(self) -> None:
        self.info: dict[str, Any] = {"backend": self.name}

    def check(self, opts: SweepOptions) -> None:
        check_available()  # without the extra: one line, exit 2, before anything starts
        # --isolation other than fresh: refused by settings/flag_checks.RULES

    def describe(self) -> dict[str, Any]:
        return dict(self.info)

    async def run(self, points: Sequence[Point], driver: Driver) -> None:
        """Run ``points`` as Ray tasks; every result goes to ``driver``."""
        ray = check_available()
        if not points:  # e.g. --resume of a run that had finished every point
            return
        owns = await _connect_in_background(ray, driver.opts)
        run = _RayRun(ray, driver)
        try:
            await run.run(list(points))
        finally:
            self.info.update(run.info)
            if owns:
                await asyncio.to_thread(ray.shutdown)


async def _connect_in_background(ray, opts: SweepOptions) -> bool:
    """``ray.init`` blocks for minutes on an address where no cluster answers and cannot be
    interrupted: run it in a daemon thread (a Ctrl-C or a timeout then leaves it behind
    instead of hanging the exit) and give up after ``RESIDUE_LAB_RAY_CONNECT_TIMEOUT``."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(ok: bool, value) -> None:
        if not done.done():
            (done.set_result if ok else done.set_exception)(value)

    def target() -> None:
        try:
            result = (True, _connect(ray, opts))
        except BaseException as e:  # handed to the event loop
            result = (False, e)
        try:
            loop.call_soon_threadsafe(settle, *result)
        except RuntimeError:  # the loop is gone: the sweep ended while we connected
            pass

    threading.Thread(target=target, name="ray-connect", daemon=True).start()
    timeout = float(os.environ.get(CONNECT_TIMEOUT_ENV) or CONNECT_TIMEOUT_S)
    try:
        return await asyncio.wait_for(asyncio.shield(done), timeout)
    except asyncio.TimeoutError:
        raise CannotRun(f"--backend ray: no Ray cluster answered at "
                           f"{opts.running.ray_address or 'auto'!r} within {timeout:g}s "
                           f"({CONNECT_TIMEOUT_ENV} to wait longer)") from None


def _connect(ray, opts: SweepOptions) -> bool:
    """Connect to the cluster; True when this call did (and so must disconnect)."""
    if ray.is_initialized():
        return False
    address = opts.running.ray_address or "auto"
    # ray.init runs off the main thread (the event loop keeps its signal handlers), where
    # Ray says it cannot set its SIGTERM handler: that is intended here.
    logging.getLogger("ray._private.worker").addFilter(_NotMainThreadNote())
    try:
        ray.init(address=address, runtime_env=runtime_env(), log_to_driver=False,
                 logging_level=logging.WARNING, configure_logging=True)
    except (ConnectionError, RuntimeError, ValueError) as e:
        why = (str(e).strip().splitlines() or [repr(e)])[0].strip("'\"")
        raise CannotRun(f"--backend ray: cannot connect to a Ray cluster at "
                           f"{address!r}: {why}") from None
    return True


class _NotMainThreadNote(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "not the main thread" not in record.getMessage()


def runtime_env() -> dict[str, Any]:
    """What every task's worker gets: this checkout's packages, unless turned off."""
    if os.environ.get(SHIP_CODE_ENV, "1") == "0":
        return {}
    import engine
    import harness
    return {"py_modules": [str(Path(harness.__file__).parent), str(Path(engine.__file__).parent)],
            "excludes": ["__pycache__", "*.pyc", "*.log"]}


def task_resources(opts: SweepOptions, cluster_resources: dict[str, float]) -> dict[str, Any]:
    """Ray options that claim one slot for one data point: a GPU group's GPUs
    (``--gpus 0+1,2+3``: two per point, the server runs across both). ``--gpus 0,0`` (two
    servers per GPU, locally) becomes half a GPU per point: Ray packs two on each GPU."""
    if gpu_engine(opts):
        per_gpu = max(Counter(s.gpu for s in opts.running.slots if s.gpu is not None).values(),
                      default=1)
        size = max((s.tensor_parallel_size for s in opts.running.slots), default=1)
        return {"num_gpus": size if per_gpu == 1 else round(size / per_gpu, 4), "num_cpus": 1}
    if cluster_resources.get(SLOT_RESOURCE, 0) >= 1:
        return {"num_cpus": 0, "resources": {SLOT_RESOURCE: 1}}
    return {"num_cpus": 1}


def _per_point(res_name: str, per_point: float) -> str:
    if res_name != "GPU":
        return f"one {res_name!r}"
    if per_point == 1:
        return "one GPU"
    return (f"{per_point:g} GPUs (one server across them)" if per_point > 1
            else f"{per_point:g} of a GPU")


def records_by_node(records: list[PhaseRecord]) -> dict[str, dict[str, int]]:
    """Verdict counts per node (``records.recordkeys.by_node``; the report's section reads
    it too)."""
    return {node: dict(c) for node, c in by_node(records).items()}


# -- errors ----------------------------------------------------------------------------
def is_infra_error(ray, err: BaseException) -> bool:
    """Lost node, worker or object: the infrastructure's fault, worth one retry. An
    exception raised by our own code in the task (RayTaskError with an ordinary cause)
    is not."""
    exc = ray.exceptions
    if isinstance(err, exc.TaskCancelledError):
        return False
    if isinstance(err, exc.RayTaskError):
        cause = getattr(err, "cause", None)
        return isinstance(cause, exc.RayError) and not isinstance(cause, exc.RayTaskError) \
            and is_infra_error(ray, cause)
    if isinstance(err, getattr(exc, "RuntimeEnvSetupError", ())):
        return False  # fails the same way everywhere: a setup problem, not a lost node
    return isinstance(err, exc.RayError)


class _Tracker:
    """Where each attempt started (a tiny actor on the driver's node): a task lost
    mid-point can then be pinned on its node, and a task lost before it started does
    not count as a retry."""

    def __init__(self) -> None:
        self._where: dict[tuple, dict[str, str]] = {}

    def started(self, key: tuple, attempt: int, node_id: str, label: str, slot: str) -> None:
        self._where[(tuple(key), attempt)] = {"node_id": node_id, "node": label, "slot": slot}

    def where(self, key: tuple, attempt: int) -> dict[str, str] | None:
        return self._where.get((tuple(key), attempt))


# -- the driver ------------------------------------------------------------------------
@dataclass
class _Attempt:
    point: Point
    attempt: int = 1
    resubmits: int = 0
    avoid: str | None = None                 # node id the retry stays away from
    first_failure: str | None = None         # why attempt 1 was lost
    submitted_at: float = 0.0


class _RayRun:
    def __init__(self, ray, driver: Driver):
        self.ray = ray
        self.driver = driver
        self.opts = driver.opts
        self.info: dict[str, Any] = {}
        self.inflight: dict[Any, _Attempt] = {}
        self.remote_fn = None
        self.tracker = None
        self.base_options: dict[str, Any] = {}
        self.shared_ref = None

    # -- setup -------------------------------------------------------------------------
    def _setup(self) -> None:
        ray = self.ray
        resources = ray.cluster_resources()
        self.base_options = {**task_resources(self.opts, resources), "max_retries": 0,
                             "retry_exceptions": False, "scheduling_strategy": "SPREAD"}
        need = self.base_options.get("resources") or (
            {"GPU": self.base_options["num_gpus"]} if self.base_options.get("num_gpus")
            else {"CPU": 1})
        (res_name, per_point), = need.items()
        slots = int(resources.get(res_name, 0) / per_point + 1e-6)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if slots < 1:
            raise CannotRun(f"--backend ray: the cluster has no {res_name!r} resource "
                               f"for a slot ({len(nodes)} nodes: "
                               f"{sorted(resources)}); start nodes with "
                               + ("--num-gpus" if res_name == "GPU" else
                                  f"--resources '{{\"{SLOT_RESOURCE}\": N}}' or --num-cpus"))
        self.slot_resource = res_name
        self.info = {
            "backend": "ray", "address": self.opts.running.ray_address or "auto",
            "nodes": len(nodes), "slots": slots, "slot_resource": res_name,
            "ray_version": ray.__version__}
        _say(f"ray: {len(nodes)} node(s), {slots} slot(s) of {res_name!r}; "
              f"{_per_point(res_name, per_point)} per data point")
        tracker = ray.remote(num_cpus=0, max_restarts=0)(_Tracker)
        try:  # on the driver's node (hard: Ray's soft affinity placed it elsewhere)
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            tracker = tracker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                ray.get_runtime_context().get_node_id(), soft=False))
        except Exception:
            pass
        self.tracker = tracker.remote()
        self.remote_fn = ray.remote(run_point_task)
        self.shared_ref = ray.put(self.driver.runner_spec)

    def _submit(self, att: _Attempt) -> None:
        att.submitted_at = time.monotonic()
        choices = self._avoid_options(att.avoid) if att.avoid else []
        for extra in choices + [{}]:
            try:
                fn = self.remote_fn.options(**{**self.base_options, **extra})
            except (TypeError, ValueError):
                continue  # e.g. a Ray without label selectors: the next choice
            ref = fn.remote(self.shared_ref, att.point, att.attempt, self.tracker)
            self.inflight[ref] = att
            return

    def _avoid_options(self, node_id: str) -> list[dict[str, Any]]:
        """Ways to keep a retry off the node that failed, best first, when another node
        can take it (a one-node cluster retries on another slot of the same node)."""
        others = [n for n in self.ray.nodes() if n.get("Alive") and n["NodeID"] != node_id
                  and n.get("Resources", {}).get(self.slot_resource, 0) >= 1]
        if not others:
            return []
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        return [
            # any node but that one (Ray labels every node with its id)
            {"label_selector": {"ray.io/node-id": f"!{node_id}"},
             "scheduling_strategy": "DEFAULT"},
            # older Ray: prefer one other node (soft: elsewhere if it is gone too)
            {"scheduling_strategy": NodeAffinitySchedulingStrategy(
                random.choice(others)["NodeID"], soft=True)},
        ]

    # -- main loop ---------------------------------------------------------------------
    async def run(self, points: list[Point]) -> None:
        if not points:
            return
        await asyncio.to_thread(self._setup)
        for p in points:
            self._submit(_Attempt(p))
        try:
            while self.inflight:
                ready, _ = await asyncio.to_thread(
                    self.ray.wait, list(self.inflight), num_returns=1, timeout=POLL_S,
                    fetch_local=True)
                for ref in ready:
                    await self._collect(ref, self.inflight.pop(ref))
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self._cancel_all))
            raise

    async def _collect(self, ref, att: _Attempt) -> None:
        ray = self.ray
        try:
            result = await asyncio.to_thread(ray.get, ref)
        except Exception as e:
            if not is_infra_error(ray, e):
                if isinstance(e, ray.exceptions.RayTaskError):
                    raise CannotRun(f"--backend ray: the harness failed on residue "
                                       f"{att.point.residue} ({att.point.cfg_id}): "
                                       f"{_one_line(getattr(e, 'cause', e) or e)}") from e
                raise
            where = await asyncio.to_thread(self._where, att)
            self._lost(att, e, where)
            return
        self._write(att, result)

    def _write(self, att: _Attempt, result: dict[str, Any]) -> None:
        for name, text in (result.get("logs") or {}).items():
            self.driver.server_log(name, text)
        # the process boundary: the task shipped each record's as_dict() (ray_task.py)
        records = [PhaseRecord.from_dict(d) for d in result["records"]]
        for rec in records:
            rec.extra["ray_node_id"] = result["node_id"]
            rec.extra["attempt"] = att.attempt
            if att.first_failure:
                rec.extra["infra_retry"] = att.first_failure
        self.driver.point_done(att.point, records, result["timing"])

    def _lost(self, att: _Attempt, err: BaseException, where: dict[str, str] | None) -> None:
        """A node/worker was lost under this attempt (``where``: where it started, None if
        it never did): retry once elsewhere, or record ``infra``."""
        p = att.point
        if where is None and att.resubmits < MAX_UNSTARTED_RESUBMITS:
            # Never started (e.g. queued on a node that died): not a failed attempt.
            att.resubmits += 1
            att.avoid = node_id_in(err) or att.avoid
            _say(f"ray: residue {p.residue} ({p.cfg_id}) lost before it started "
                 f"({_one_line(err, 120)}); submitted again")
            self._submit(att)
            return
        where = where or {"node": node_id_in(err) or "unknown node", "node_id": node_id_in(err) or "",
                          "slot": "?"}
        why = f"node {where['node']} (slot {where['slot']}) lost mid-point: {_one_line(err)}"
        if att.attempt == 1:
            _say(f"ray: residue {p.residue} ({p.cfg_id}): {why}; retrying once elsewhere")
            self._submit(_Attempt(att.point, attempt=2, avoid=where.get("node_id") or None,
                                  first_failure=why))
            return
        reason = f"infrastructure: attempt 1: {att.first_failure}; retry: {why}"
        _say(f"ray: residue {p.residue} ({p.cfg_id}): retry lost too: {why}; recorded as infra")
        extra = {"ray_node_id": where.get("node_id"), "attempt": att.attempt,
                 "infra_retry": att.first_failure}
        self.driver.point_lost(att.point, slot=where.get("slot") or "?", node=where["node"],
                               reason=reason, since=att.submitted_at, extra=extra)

    def _where(self, att: _Attempt) -> dict[str, str] | None:
        if self.tracker is None:
            return None
        try:
            return self.ray.get(self.tracker.where.remote(att.point.key, att.attempt), timeout=10)
        except Exception as e:
            _say(f"ray: cannot ask where residue {att.point.residue} ran: {_one_line(e, 120)}")
            return None

    def _cancel_all(self) -> None:
        """Ctrl-C: force-cancel every outstanding task (Ray SIGKILLs a running worker; its
        watchdog kills the servers), then wait for them to be gone."""
        refs = list(self.inflight)
        for ref in refs:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:
                pass
        if refs:
            try:
                self.ray.wait(refs, num_returns=len(refs), timeout=CANCEL_WAIT_S,
                              fetch_local=False)
            except Exception:
                pass
        self.inflight.clear()


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def node_id_in(err: BaseException) -> str | None:
    """NodeDiedError names the dead node in its message ("node ID: <hex>")."""
    m = re.search(r"node ID: ([0-9a-f]{16,})", str(err))
    return m.group(1) if m else None
