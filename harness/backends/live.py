"""``--url``: data points on a server that is already running (``harness/run/live.py``).

Nothing is started or stopped: ``--concurrency`` workers take points from one queue and
run each point's phases on the one running server, through one HTTP client whose every
request counts against the run's request budget. A point is started only with room in
the budget for all of its requests (the plan was sized to fit, so this holds unless the
plan was wrong); one that does not fit, and every point after the server stopped
answering, is recorded ``infra`` with the reason, never sent.
"""
from __future__ import annotations

import socket
import time
from typing import Any, Sequence

from ..serve.poison import off_record
from ..serve.client import EngineClient
from ..settings.sweep_options import SweepOptions
from ..run.live import LiveServer, requests_per_point
from ..serve.live_target import LiveTarget
from ..run.driver import Driver
from ..run.plan import Point
from ..run.point import PointRunner
from ..run.record_builder import timing_record
from ..run.scheduling import PointQueue
from ..serve.slots import Slot
from .base import run_slot_workers

__all__ = ["LiveBackend"]


class LiveBackend:
    name = "live"

    def __init__(self) -> None:
        self._target: LiveTarget | None = None

    def check(self, opts: SweepOptions) -> None:
        """Only a ``--url`` sweep has a running server to send its points to: without
        ``--url``, ``--backend live`` is refused by ``settings/flag_checks.RULES``."""

    def describe(self) -> dict[str, Any]:
        t = self._target
        if t is None:
            return {"backend": self.name}
        return {"backend": self.name, "url": t.url, "slots": t.concurrency,
                "requests": t.budget.describe(), "api_key_from": t.key_source,
                "server_report": t.report}

    async def run(self, points: Sequence[Point], driver: Driver) -> None:
        self._target = target = driver.opts.running.live
        http = target.async_http()
        try:
            runner = driver.point_runner(http)
            run = _LiveRun(driver, runner, target)
            queue = PointQueue(points, affinity=False)
            await run_slot_workers(driver.opts.running.slots, lambda slot: run.worker(slot, queue),
                                   "live")
        finally:
            await http.aclose()


class _LiveRun:
    def __init__(self, driver: Driver, runner: PointRunner, target: LiveTarget):
        self.driver = driver
        self.runner = runner
        self.target = target
        self.per_point = requests_per_point(driver.opts.measure.phases)
        self.gone: str | None = None   # why no more points are sent
        self.server = LiveServer(target.url, driver.logs_dir / "live-server.log")
        self.info = runner.adapter.info.copy()   # what the server reported, read once
        # --poison auto: a running server cannot be filled before its first request
        self.info.poison = off_record(driver.opts.serving.poison)

    async def worker(self, slot: Slot, queue: PointQueue) -> None:
        client = EngineClient(self.target.url, timeout=self.driver.opts.running.timeout,
                              api_key=self.target.api_key, http=self.runner.http)
        while (point := queue.next(slot.id, None)) is not None:
            t_point = time.monotonic()
            if self.gone is None and not self.target.budget.reserve(self.per_point):
                self.gone = (f"--max-requests {self.target.budget.limit} spent "
                             f"({self.target.budget.sent} sent): not sent")
            if self.gone is not None:
                self.driver.point_lost(point, slot=slot.id, node=socket.gethostname(),
                                       reason=self.gone, since=t_point)
                continue
            self.driver.point_started(point, slot.id)
            records, dead = await self.runner.run_phases(point, slot, self.server, client,
                                                         self.info.copy(), self.driver.phase_done)
            if dead:
                self.gone = (f"the server at {self.target.url} stopped answering during "
                             f"residue {point.residue}: not sent")
            requests = time.monotonic() - t_point
            self.driver.point_done(point, records, timing_record(requests=requests,
                                                                 point=requests), written=True)
