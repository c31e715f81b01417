"""``--backend local``: data points on this machine's slots (CPU slots or GPU ids).

Slot workers take points from one shared queue (work stealing: a slow point never idles
another slot). With ``--isolation fresh`` each point boots its own server; its
teardown runs in the background, and the slot's next boot waits until every process of it
is gone (a GPU's memory is free then); ``restore`` / ``reset`` / ``shared`` keep a slot's server
for the next point of the same configuration, and between points ``restore`` returns it to
its just-booted state (harness/serve/restore.py: sleep level 1, wake up, reset, each proven) and
``reset`` resets its prefix cache.

``auto`` runs two queues at once: the reuse pass (``restore`` where the engine can, else
``reset``; affinity, as those) and the fresh confirmations (run/auto.py). A slot takes
reuse work while a configuration is unserved or worth helping, else a fresh confirmation,
so fresh servers boot beside the reuse sweep wherever there is a slot for them (``--gpus
0,0,0`` puts three servers on one GPU); a reuse point that was not ok adds its fresh twin
as it finishes, and a slot with nothing to take waits while reuse points still run.
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..serve.client import EngineClient, shared_http
from ..settings.configs import config_id
from ..settings.sweep_options import SweepOptions
from ..run.driver import Driver
from ..run.plan import Point
from ..run.point import PointRunner, Server
from ..names.reference import MATRIX_REFERENCES
from ..run.auto import (fresh_twin, late_confirmations, more_servers,
                        needs_confirmation, settle)
from ..records.phase_record import PhaseRecord
from ..records.recordkeys import point_key
from ..run.record_builder import timing_record
from ..names.isolation import IsolationName, POLICIES, policy
from ..serve.facts import ServerFacts
from ..serve.isolation import machinery
from ..run.scheduling import PointQueue
from ..server_pool import BootFailure, Slot
from .base import run_slot_workers

__all__ = ["LocalBackend", "BOOT_FAILURES_ALLOWED", "boot_failures_allowed", "BootGate",
           "COLD_BOOT_FACTOR"]

# Boot failures of one configuration, per isolation (the pass's own under auto), before
# that pass's remaining points of it are recorded boot-fail without booting: each
# isolation's policy says how many (harness/names/isolation.py).
BOOT_FAILURES_ALLOWED = {n: p.boot_failures_allowed for n, p in POLICIES.items() if not p.passes}


def boot_failures_allowed(isolation: str) -> int:
    return policy(isolation).boot_failures_allowed


# The warm-up boot's timeout, in --boot-timeouts: a first boot on a cold machine compiles
# what later boots find in the shared caches (vLLM: torch.compile, Inductor, Triton).
COLD_BOOT_FACTOR = 3.0


class BootGate:
    """How many servers boot at once (``opts.running.boot_parallel``, 0: no limit) and, with
    ``opts.running.boot_warmup``, one boot alone first, on the cold-compile timeout, before any
    other starts: on a cold GPU machine ten different configurations compiling together
    were each still compiling when their timeout came (issue 23). The wait at the gate is
    not boot time: the timeout starts when the boot does."""

    def __init__(self, opts: SweepOptions) -> None:
        self.sem = asyncio.Semaphore(opts.running.boot_parallel) if opts.running.boot_parallel else None
        self.warmed = asyncio.Event()
        self.warming = False
        self.cold_timeout = opts.running.boot_timeout * COLD_BOOT_FACTOR
        if not opts.running.boot_warmup:
            self.warmed.set()

    async def boot(self, runner: PointRunner, point: Point, slot: Slot):
        if not self.warmed.is_set():
            if not self.warming:
                self.warming = True
                try:   # a failed warm-up still compiled something: the others go on
                    return await runner.boot(point, slot, timeout=self.cold_timeout)
                finally:
                    self.warmed.set()
            await self.warmed.wait()
        if self.sem is None:
            return await runner.boot(point, slot)
        async with self.sem:
            return await runner.boot(point, slot)


@dataclass
class _Held:
    """The server a slot holds between points, and the point it was booted for: its
    configuration, isolation and timing record (where its teardown's time goes)."""

    server: Server | None = None
    client: EngineClient | None = None
    cfg: str | None = None
    iso: str | None = None
    timing: dict[str, float] | None = None
    info: ServerFacts = field(default_factory=ServerFacts)

    def serves_next(self) -> str | None:
        """The configuration this slot's server can take next without a boot (None where
        its isolation boots one per point)."""
        return self.cfg if self.iso and policy(self.iso).reuses_server else None


class LocalBackend:
    name = "local"

    def check(self, opts: SweepOptions) -> None:
        """Every option works locally."""

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}

    async def run(self, points: Sequence[Point], driver: Driver) -> None:
        http = shared_http()
        try:
            await _LocalRun(driver, driver.point_runner(http)).run(points)
        finally:
            await http.aclose()


class _LocalRun:
    def __init__(self, driver: Driver, runner: PointRunner):
        self.driver = driver
        self.opts = driver.opts
        self.runner = runner
        self._teardowns: set[asyncio.Task] = set()
        self._slot_stops: dict[str, asyncio.Task] = {}   # slot id -> its last server's stop
        self._boot_failures: Counter = Counter()
        self._gate = BootGate(self.opts)
        self.auto = bool(policy(self.opts.running.isolation).passes)
        self.fresh: PointQueue | None = None     # auto: the fresh confirmations
        self._keys: set[tuple] = set()
        self._reset_running = 0
        self._wake = asyncio.Event()
        # first / consensus: the reset pass's points and records, judged when it is over
        self._late = self.auto and self.opts.measure.reference in MATRIX_REFERENCES
        self._reset_done: list[tuple[Point, list[PhaseRecord]]] = []

    def _iso(self, point: Point) -> str:
        return point.isolation or self.opts.running.isolation

    def _reuses(self, point: Point) -> bool:
        """The point runs on a kept server (under auto: it is in the reuse pass)."""
        return policy(self._iso(point)).reuses_server

    async def run(self, points: Sequence[Point]) -> None:
        if self.auto:
            # the reuse pass (one server per configuration and slot) and the confirmations
            queue = PointQueue([p for p in points if self._reuses(p)], affinity=True)
            self.fresh = PointQueue([p for p in points if not self._reuses(p)],
                                    affinity=False)
            self._keys = {p.key for p in points}
            if self._late and self.driver.resumed:
                self._seed_late_from_disk(points)
        else:
            queue = PointQueue(points, affinity=policy(self.opts.running.isolation).reuses_server)
        try:
            await run_slot_workers(self.opts.running.slots, lambda slot: self._worker(slot, queue), "slot")
        finally:
            if self._teardowns:
                await asyncio.gather(*self._teardowns, return_exceptions=True)

    async def _next(self, slot: Slot, queue: PointQueue, server_cfg: str | None) -> Point | None:
        """The slot's next point; under auto, reset work first, then a fresh confirmation,
        waiting (not finishing) while reset points still running may add confirmations."""
        if not self.auto:
            return queue.next(slot.id, server_cfg)
        assert self.fresh is not None
        while True:
            point = self._next_auto(slot, queue, server_cfg)
            if point is not None:
                if self._reuses(point):
                    self._reset_running += 1
                return point
            if not self._reset_running:
                if self._late and self._add_late_confirmations():
                    continue
                return None
            self._wake.clear()
            await self._wake.wait()

    def _next_auto(self, slot: Slot, queue: PointQueue, server_cfg: str | None) -> Point | None:
        """A slot keeps its reset server's configuration, else starts an unserved one;
        otherwise a fresh confirmation comes before a second reset server for a
        configuration already served (which the queue allows only where it pays off)."""
        assert self.fresh is not None
        if (server_cfg is not None and queue.left(server_cfg)) or queue.unserved():
            return queue.next(slot.id, server_cfg)
        point = self.fresh.next(slot.id, None)
        if point is not None:
            queue.release(slot.id)
            return point
        return queue.next(slot.id, None)

    def _finished(self, point: Point, records: list[PhaseRecord]) -> None:
        """Auto: a reuse point that was not ok gets its fresh twin (unless planned)."""
        if not self.auto or not self._reuses(point):
            return
        self._reset_running -= 1
        if self._late:
            self._reset_done.append((point, records))
        if needs_confirmation(point, records):
            self._add_twin(fresh_twin(point, f"not ok on {point.isolation}"))
        self._wake.set()

    def _add_twin(self, twin: Point) -> bool:
        if twin.key in self._keys or self.fresh is None:
            return False
        self._keys.add(twin.key)
        self.fresh.add(twin)
        self.driver.point_added(twin)
        return True

    def _seed_late_from_disk(self, todo: Sequence[Point]) -> None:
        """``--resume`` under first / consensus: the reuse points an earlier process
        finished are judged with this one's at the end of the pass (an interrupted run's
        records on disk are still unjudged), and fresh points it ran are not run again."""
        by_key: dict[tuple, list[PhaseRecord]] = {}
        for r in self.driver.records_so_far():
            by_key.setdefault(point_key(r), []).append(r)
            if not policy(r.isolation or "fresh").reuses_server:
                self._keys.add(point_key(r))
        left = {p.key for p in todo}
        for p in self.driver.plan.points:
            if self._reuses(p) and p.key not in left and p.key in by_key:
                self._reset_done.append((p, by_key[p.key]))

    def _add_late_confirmations(self) -> bool:
        """Once, when the reset pass is over: the fresh twins of the reset points that
        the matrix reference judges not ok (``run.auto.late_confirmations``)."""
        self._late = False
        twins = late_confirmations(self._reset_done, self.opts.measure.reference,
                                   [config_id(c) for c in self.opts.serving.configs])
        return any([self._add_twin(t) for t in twins])

    async def _worker(self, slot: Slot, queue: PointQueue) -> None:
        held = _Held()
        try:
            while (point := await self._next(slot, queue, held.serves_next())) is not None:
                self.driver.point_started(point, slot.id)
                await self._run_point(point, slot, queue, held)
        finally:
            if held.server is not None:
                await self.runner.stop(held.server, held.client, timing=held.timing)

    async def _run_point(self, point: Point, slot: Slot, queue: PointQueue, held: "_Held") -> None:
        """One point on ``slot``: the held server prepared (reset, restore) or a new one
        booted, its phases measured, the server kept or stopped as the isolation says."""
        t_point = time.monotonic()
        timing = timing_record()
        iso = self._iso(point)
        how = policy(iso)
        timing["pass"] = iso  # type: ignore[assignment]  (the driver splits by it)
        reuse, replaced = await self._prepare_held(point, iso, how, held, timing)
        if not reuse and not await self._boot_for(point, slot, queue, iso, how, held, timing,
                                                  t_point, replaced):
            return
        t_req = time.monotonic()
        # auto's fresh points may need more servers first (run/auto.more_servers):
        # their records are written once settled
        confirming = self.auto and iso == IsolationName.FRESH
        records, server_dead = await self.runner.run_phases(
            point, slot, held.server, held.client, held.info,  # type: ignore[arg-type]
            None if confirming else self.driver.phase_done)
        if confirming and more_servers(point, [records]):
            records = await self._confirm_again(point, slot, records)
        timing["requests"] = time.monotonic() - t_req
        if not how.reuses_server or server_dead:
            # Teardown in the background (the slot's next boot waits for it); its
            # time is filled in when it finishes.
            self._background_stop(held.server, held.client, timing, slot)
            held.server = held.client = None
            held.cfg = held.iso = None
        # the point's wall time on its slot, teardown excluded
        timing["point"] = time.monotonic() - t_point
        self.driver.point_done(point, records, timing, written=not confirming)
        self._finished(point, records)
        # What the queue weighs a new server against before it helps with a
        # configuration another slot serves.
        queue.observe(point.cfg_id, boot=None if reuse else timing["boot"],
                      point=timing["point"] - timing["boot"])

    async def _prepare_held(self, point: Point, iso: str, how, held: "_Held",
                            timing: dict) -> tuple[bool, str | None]:
        """Whether the held server serves this point (prepared first where the isolation
        ``how`` says: reset the prefix cache, restore), and why it was replaced if it failed."""
        reuse = (how.reuses_server and held.server is not None and held.iso == iso
                 and held.cfg == point.cfg_id and held.server.tree_alive())
        replaced: str | None = None
        prepare = machinery(iso).prepare
        if reuse and prepare is not None:   # reset: the prefix cache; restore
            spent = await prepare(held.client, held.server, held.info)
            if spent is not None:
                timing[iso] = spent
            # a server that could not be prepared (a failed restore) is replaced:
            # the point, not sent yet, runs on a just-booted server instead
            replaced, held.info.unusable = held.info.unusable, None
            reuse = replaced is None
        return reuse, replaced

    async def _boot_for(self, point: Point, slot: Slot, queue: PointQueue, iso: str, how,
                        held: "_Held", timing: dict, t_point: float,
                        replaced: str | None) -> bool:
        """A new server for the point in ``held`` (the old one stopped in the background);
        False when it failed to boot (the point's records are boot-fail, already written)."""
        if held.server is not None:
            self._background_stop(held.server, held.client, held.timing, slot)
            held.server = held.client = None
        await self._slot_free(slot)
        try:
            held.server, held.client, held.info = await self._gate.boot(self.runner, point, slot)
        except BootFailure as e:
            timing["boot"] = time.monotonic() - t_point
            timing["point"] = time.monotonic() - t_point
            failed = self.runner.boot_fail_records(point, slot, e)
            self.driver.point_done(point, failed, timing)
            self._after_boot_failure(point, slot, e, queue)
            self._finished(point, failed)
            return False
        held.cfg, held.iso, held.timing = point.cfg_id, iso, timing
        timing["boot"] = held.server.boot_s or 0.0
        booted = machinery(iso).booted
        if booted is not None:   # e.g. restore: nothing to restore yet
            booted(held.info, replaced)
        return True

    async def _confirm_again(self, point: Point, slot: Slot, first: list[PhaseRecord]
                             ) -> list[PhaseRecord]:
        """The same fresh point on more fresh servers until ``more_servers`` is satisfied
        (a server that fails to boot ends it: what ran is what the records say)."""
        runs = [first]
        while more_servers(point, runs):
            try:
                server, client, info = await self._gate.boot(self.runner, point, slot)
            except BootFailure:
                break
            try:
                recs, _ = await self.runner.run_phases(point, slot, server, client, info)
            finally:
                await self.runner.stop(server, client)
            runs.append(recs)
        return settle(runs)

    def _after_boot_failure(self, point: Point, slot: Slot, e: BootFailure,
                            queue: PointQueue) -> None:
        """A configuration that keeps failing to boot is not booted again for every
        remaining residue (a minute or more each on a GPU): its remaining points are
        recorded as boot-fail, naming the failure (each failure is a point whose boot was
        already tried ``run.point.BOOT_ATTEMPTS`` times). Failures count per configuration and
        isolation (under auto, per pass): a fresh confirmation that fails to boot says
        nothing about the reset server already serving that configuration, so only that
        pass's queue is drained, after that pass's allowance (``BOOT_FAILURES_ALLOWED``);
        a drained reuse point gets its fresh twin, so every residue still gets a verdict."""
        iso = self._iso(point)
        key = (point.cfg_id, iso)
        self._boot_failures[key] += 1
        if self._boot_failures[key] < boot_failures_allowed(iso):
            return
        if self.auto:
            assert self.fresh is not None
            rest_points = (queue if self._reuses(point) else self.fresh).drain(point.cfg_id)
        else:
            rest_points = queue.drain(point.cfg_id)
        for rest in rest_points:
            why = BootFailure(f"not started: this configuration failed to boot "
                              f"{self._boot_failures[key]}x (last: {e.reason})",
                              e.log_excerpt, attempts=0)
            self.driver.point_done(rest, self.runner.boot_fail_records(rest, slot, why), None)
            if self.auto and self._reuses(rest):
                # a residue outside auto's confirmation set still gets a verdict: the
                # reuse pass could not serve it, so a fresh server measures it
                self._add_twin(fresh_twin(rest, f"not ok on {rest.isolation}"))

    def _background_stop(self, server, client, timing: dict[str, float] | None,
                         slot: Slot) -> None:
        """The server's teardown, off the slot's path: the slot's requests are done, its
        records written; the slot's next boot waits for it (``_slot_free``)."""
        task = asyncio.create_task(self.runner.stop(server, client, timing=timing))
        self._teardowns.add(task)
        self._slot_stops[slot.id] = task
        task.add_done_callback(self._teardowns.discard)

    async def _slot_free(self, slot: Slot) -> None:
        """A slot's next server boots once every process of its last one is gone: on a GPU
        the old one's memory is free then (a boot beside a teardown could OOM, issue 33
        item 12). The teardown runs while the slot plans and writes, not beside a boot."""
        task = self._slot_stops.pop(slot.id, None)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
