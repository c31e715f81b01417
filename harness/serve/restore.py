"""``--isolation restore``: return a running server to its just-booted state between data
points, and prove that it happened.

The means is vLLM's sleep mode (the server was started with ``--enable-sleep-mode``; vLLM
serves the endpoints with ``VLLM_SERVER_DEV_MODE=1``):

1. ``POST /sleep?level=1``: the engine pauses, resets its prefix cache and discards the KV
   cache (on a hybrid that holds the GDN/Mamba state too), offloading the weights to CPU;
2. ``GET /is_sleeping`` must say ``true``, the sleep-state gauge
   (``vllm:engine_sleep_state``) ``weights_offloaded``, and the server's log must show the
   allocator's line for *this* sleep with more than 0 GiB "discarded directly" (a server
   without sleep mode logs 0.00 GiB: nothing was discarded, nothing was restored). The
   worker's "Sleep mode freed X GiB" is no proof of a discard: at level 1 X counts the
   weights offloaded to CPU too;
3. ``POST /wake_up``: the weights come back, the KV cache is new, empty memory;
   ``GET /is_sleeping`` must say ``false`` (and the gauge ``awake``);
4. ``POST /reset_prefix_cache``;
5. ``/metrics``: no request running, KV-cache usage 0.

Every check keeps its value in the record (``restore.checks``). One that cannot run (the
metrics absent, a scrape that failed, only the worker's freed line in the log) is named
there with why, and the report's restore row says so instead of "each proven": nothing
is called proven that was not measured. The point runner then checks what reset
isolation checks too: the cold request's ``cached_tokens`` is 0. Each step's time is
recorded; a step or check that fails raises ``RestoreFailed`` naming it and the value it
read, and the server is replaced (harness/serve/isolation.py).

Why sleep and not only a prefix-cache reset: on vLLM 0.26.0 a reset server answered the
Bug B rule's cell differently depending on what it had served (masked, or another wrong
answer), and sleep level 1 + wake + reset gave the just-booted answer back byte for byte
(DESIGN.md, "What a reset server is").
"""
from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

from .client import ClientError, EngineClient
from ..errors import HandledError

__all__ = ["SLEEP_MEANS", "RestoreFailed", "restore_server", "discarded_gib",
           "sleep_lines", "freed_lines", "Checks", "LOG_WAIT_S", "vllm_serves_sleep",
           "restore_by_fill", "SLEEP_GAUGE"]

SLEEP_MEANS = "sleep-level-1+wake+reset"
# vLLM logs the allocator line in the worker process: it reaches the log file a moment
# after the HTTP answer, at most this long
LOG_WAIT_S = 10.0
# device_allocator/cumem.py CuMemAllocator.sleep (the lab logs the same line)
_DISCARDED = re.compile(r"CuMemAllocator: sleep freed (?P<total>[\d.]+) GiB memory in total, "
                        r"of which (?P<backup>[\d.]+) GiB is backed up in CPU and the rest "
                        r"(?P<gone>[\d.]+) GiB is discarded directly")


class RestoreFailed(HandledError, RuntimeError):
    """A restore step failed or did not prove what it must; the message names it and the
    value it read. ``checks``: the record's checks up to it."""

    def __init__(self, message: str, checks: dict | None = None) -> None:
        super().__init__(message)
        self.checks = dict(checks or {})


# v1/worker/gpu_worker.py Worker.sleep: the device's free memory before and after, so what
# the sleep offloaded to CPU (level 1: the weights) and what it discarded (the KV cache)
# together. It cannot prove a discard: only the allocator's line tells the two apart.
_FREED = re.compile(r"Sleep mode freed (?P<freed>[\d.]+) GiB memory")
SLEEP_GAUGE = "vllm:engine_sleep_state"   # v1/metrics/loggers.py, by its sleep_state label
POOL_GAUGES = "vllm:num_requests_running, vllm:kv_cache_usage_perc"


def sleep_lines(log_text: str) -> list[dict[str, float]]:
    """Each sleep's allocator line, in order: GiB freed in ``total``, ``backup`` (offloaded
    to CPU: the weights, moved to the host and back by a sleep cycle) and ``gone``
    (discarded: the KV cache)."""
    return [{k: float(m[k]) for k in ("total", "backup", "gone")}
            for m in _DISCARDED.finditer(log_text)]


def freed_lines(log_text: str) -> list[float]:
    """GiB each sleep freed by the worker's 'Sleep mode freed' line: offloaded and
    discarded together (never a discard on its own)."""
    return [float(m["freed"]) for m in _FREED.finditer(log_text)]


def discarded_gib(log_text: str) -> list[float]:
    """GiB discarded by each sleep the log shows, in order, from the allocator's line
    only: the worker's 'Sleep mode freed' counts the weights offloaded to CPU too."""
    return [line["gone"] for line in sleep_lines(log_text)]


class Checks(dict):
    """Every proof of one restore by name, as the record keeps it (``restore.checks``): a
    check that ran keeps its value and ``ok``; one that could not run says why
    (``not_run``) and keeps what it read, so nothing is called proven that was not
    measured. A check that ran and failed raises ``RestoreFailed`` with its value."""

    def ran(self, name: str, value: Any, ok: bool, failure: str) -> None:
        self[name] = {"value": value, "ok": bool(ok)}
        if not ok:
            raise RestoreFailed(f"{failure}: {value!r}", self)

    def not_run(self, name: str, why: str, value: Any = None) -> None:
        self[name] = {"not_run": why, **({"value": value} if value is not None else {})}

    def gauge(self, name: str, scrape: tuple[dict, str | None], state: str,
              when: str) -> None:
        """The sleep-state gauge must say ``state`` (1) ``when``."""
        metrics, error = scrape
        if error is not None:
            return self.not_run(name, f"scrape failed: {error}")
        gauge = metrics.get("sleep_state")
        if not gauge:
            return self.not_run(name, f"metrics absent: /metrics has no {SLEEP_GAUGE}")
        self.ran(name, gauge, gauge.get(state) == 1, f"sleep-state gauge {when}")

    def pool(self, scrape: tuple[dict, str | None]) -> dict:
        """No request running and KV-cache usage 0 after the restore; returns the metrics."""
        metrics, error = scrape
        after = {k: v for k, v in metrics.items() if k != "sleep_state"}
        if error is not None:
            self.not_run("pool_empty", f"scrape failed: {error}")
        elif "running" not in after and "kv_cache_usage" not in after:
            self.not_run("pool_empty", f"metrics absent: /metrics has no {POOL_GAUGES}")
        else:
            self.ran("pool_empty", after, not after.get("running")
                     and not after.get("kv_cache_usage"),
                     "the pool is not empty after the restore")
        return after


async def restore_server(client: EngineClient, log_path: Path) -> dict[str, Any]:
    """Sleep level 1, wake up, reset the prefix cache, each step proven; returns what the
    record keeps (``means``, ``s``, ``steps``, ``discarded_gib``, ``metrics``, ``checks``:
    every check's value, or why it could not run)."""
    t0 = time.monotonic()
    steps: dict[str, float] = {}
    checks = Checks()
    offset = _size(log_path)

    async def step(name: str, coro):
        t = time.monotonic()
        try:
            out = await coro
        except ClientError as e:
            raise RestoreFailed(f"{name}: {e}", checks) from None
        steps[name] = round(time.monotonic() - t, 4)
        return out

    await step("sleep", client.sleep(level=1))
    asleep = await step("is_sleeping", client.is_sleeping())
    checks.ran("is_sleeping", asleep, asleep is True,
               "/is_sleeping did not say true after /sleep?level=1")
    checks.gauge("sleep_gauge", await client.pool_scrape(), "weights_offloaded",
                 "after /sleep?level=1")
    gone = await _discarded_since(log_path, offset, checks)
    await step("wake_up", client.wake_up())
    awake = await step("is_awake", client.is_sleeping())
    checks.ran("is_awake", awake, awake is False,
               "/is_sleeping did not say false after /wake_up")
    await step("reset", client.reset_prefix_cache())
    scrape = await client.pool_scrape()
    checks.gauge("wake_gauge", scrape, "awake", "after /wake_up")
    after = checks.pool(scrape)
    return {"means": SLEEP_MEANS, "s": round(time.monotonic() - t0, 4), "steps": steps,
            "discarded_gib": gone, "metrics": after, "checks": dict(checks)}


async def restore_by_fill(client: EngineClient, poison: dict[str, Any]) -> dict[str, Any]:
    """``--poison`` on: reset the prefix cache, fill the state again (harness/serve/poison.py),
    check the pool is empty; no weights move. A fill that answers but does not prove the
    pattern is kept in ``poison`` (the point is then ``infra``); an RPC that fails is a
    failed restore."""
    from .poison import FILL_MEANS, refill
    t0 = time.monotonic()
    steps: dict[str, float] = {}
    checks = Checks()
    try:
        await client.reset_prefix_cache()
    except ClientError as e:
        raise RestoreFailed(f"reset: {e}") from None
    steps["reset"] = round(time.monotonic() - t0, 4)
    t = time.monotonic()
    fill = await refill(client, poison)
    if "proof" not in fill:
        raise RestoreFailed(f"fill: {fill.get('error')}")
    steps["fill"] = round(time.monotonic() - t, 4)
    # an unproven fill does not fail the restore: the point is infra (harness/serve/poison.py)
    checks["fill"] = {"value": bool(fill["ok"]), "ok": bool(fill["ok"])}
    after = checks.pool(await client.pool_scrape())
    out = {"means": FILL_MEANS, "s": round(time.monotonic() - t0, 4), "steps": steps,
           "proven": fill["ok"], "metrics": after, "checks": dict(checks)}
    if fill.get("restored") is not None:   # which restore ran, its bytes, blocks, audit
        out["restored"] = fill["restored"]
    return out


async def _discarded_since(log_path: Path, offset: int, checks: Checks) -> float | None:
    """The GiB the allocator discarded in the sleep just made, from the log after
    ``offset``; waits (bounded) for the line, which the worker writes. Where the worker's
    'Sleep mode freed' line comes without it (the worker logs it after the allocator's, in
    the same process), the discard cannot be told from the weights offloaded to CPU: the
    check is named not run, its figure kept, and None returned."""
    deadline = time.monotonic() + LOG_WAIT_S
    nothing = ("the server was not started with --enable-sleep-mode, its KV memory kept "
               "its contents")
    while True:
        text = _read_from(log_path, offset)
        if lines := sleep_lines(text):
            checks.ran("discard", lines[-1], lines[-1]["gone"] > 0,
                       f"the sleep discarded {lines[-1]['gone']:.2f} GiB: {nothing}")
            return lines[-1]["gone"]
        if freed := freed_lines(text):
            if freed[-1] <= 0:   # nothing freed: nothing discarded either
                checks.ran("discard", {"freed": freed[-1]}, False,
                           f"the sleep freed {freed[-1]:.2f} GiB: {nothing}")
            checks.not_run("discard", "no allocator line: the worker's 'Sleep mode freed' "
                           "counts the weights offloaded to CPU with what was discarded",
                           {"freed": freed[-1]})
            return None
        if time.monotonic() >= deadline:
            raise RestoreFailed(f"no 'CuMemAllocator: sleep freed ...' line in {log_path.name} "
                                f"within {LOG_WAIT_S:g}s of /sleep: the discard is not proven",
                                checks)
        await asyncio.sleep(0.05)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def vllm_serves_sleep() -> bool | None:
    """Whether the vLLM this process would start serves ``/is_sleeping`` (read from its
    source, not imported: importing vLLM takes seconds and may touch the GPU); None when no
    vLLM is found here (the servers' own answers prove each restore, or fail it)."""
    from engine.vllm import source_dir
    found = source_dir()
    if found is None:
        return None
    root = found / "entrypoints"
    for path in root.rglob("*.py"):
        try:
            if '"/is_sleeping"' in path.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False
