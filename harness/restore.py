"""``--isolation restore``: return a running server to its just-booted state between data
points, and prove that it happened.

The means is vLLM's sleep mode (the server was started with ``--enable-sleep-mode``; vLLM
serves the endpoints with ``VLLM_SERVER_DEV_MODE=1``):

1. ``POST /sleep?level=1``: the engine pauses, resets its prefix cache and discards the KV
   cache (on a hybrid that holds the GDN/Mamba state too), offloading the weights to CPU;
2. ``GET /is_sleeping`` must say ``true``, the sleep-state gauge ``weights_offloaded``
   (where ``/metrics`` has it), and the server's log must show the allocator's line for
   *this* sleep with more than 0 GiB "discarded directly" (a server without sleep mode
   logs 0.00 GiB: nothing was discarded, nothing was restored);
3. ``POST /wake_up``: the weights come back, the KV cache is new, empty memory;
   ``GET /is_sleeping`` must say ``false`` (and the gauge ``awake``);
4. ``POST /reset_prefix_cache``;
5. ``/metrics``: no request running, KV-cache usage 0, where the server reports them.

The point runner then checks what reset isolation checks too: the cold request's
``cached_tokens`` is 0. Each step's time is recorded; a step that fails raises
``RestoreFailed`` naming it, and the point's records say so (``invalid``).

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
from .errors import HandledError

__all__ = ["SLEEP_MEANS", "RestoreFailed", "restore_server", "discarded_gib",
           "sleep_lines", "LOG_WAIT_S", "vllm_serves_sleep",
           "restore_by_fill"]

SLEEP_MEANS = "sleep-level-1+wake+reset"
# vLLM logs the allocator line in the worker process: it reaches the log file a moment
# after the HTTP answer, at most this long
LOG_WAIT_S = 10.0
# device_allocator/cumem.py CuMemAllocator.sleep (the lab logs the same line)
_DISCARDED = re.compile(r"CuMemAllocator: sleep freed (?P<total>[\d.]+) GiB memory in total, "
                        r"of which (?P<backup>[\d.]+) GiB is backed up in CPU and the rest "
                        r"(?P<gone>[\d.]+) GiB is discarded directly")


class RestoreFailed(HandledError, RuntimeError):
    """A restore step failed or did not prove what it must; the message names it."""


# v1/worker/gpu_worker.py Worker.sleep: what the sleep freed, weights offloaded and KV
# discarded together (a fallback where the allocator's own line is not in the log)
_FREED = re.compile(r"Sleep mode freed (?P<freed>[\d.]+) GiB memory")


def sleep_lines(log_text: str) -> list[dict[str, float]]:
    """Each sleep's allocator line, in order: GiB freed in ``total``, ``backup`` (offloaded
    to CPU: the weights, moved to the host and back by a sleep cycle) and ``gone``
    (discarded: the KV cache)."""
    return [{k: float(m[k]) for k in ("total", "backup", "gone")}
            for m in _DISCARDED.finditer(log_text)]


def discarded_gib(log_text: str) -> list[float]:
    """GiB discarded by each sleep the log shows, in order (the allocator's line; else the
    worker's 'Sleep mode freed' line)."""
    found = [line["gone"] for line in sleep_lines(log_text)]
    return found or [float(m["freed"]) for m in _FREED.finditer(log_text)]


async def restore_server(client: EngineClient, log_path: Path) -> dict[str, Any]:
    """Sleep level 1, wake up, reset the prefix cache, each step proven; returns what the
    record keeps (``means``, ``s``, ``steps``, ``discarded_gib``, ``metrics``)."""
    t0 = time.monotonic()
    steps: dict[str, float] = {}
    offset = _size(log_path)

    async def step(name: str, coro):
        t = time.monotonic()
        try:
            out = await coro
        except ClientError as e:
            raise RestoreFailed(f"{name}: {e}") from None
        steps[name] = round(time.monotonic() - t, 4)
        return out

    await step("sleep", client.sleep(level=1))
    if await step("is_sleeping", client.is_sleeping()) is not True:
        raise RestoreFailed("/is_sleeping did not say true after /sleep?level=1")
    asleep = await client.sleep_state()
    if asleep and asleep.get("weights_offloaded") != 1:
        raise RestoreFailed(f"sleep-state gauge after /sleep?level=1: {asleep}")
    gone = await _discarded_since(log_path, offset)
    await step("wake_up", client.wake_up())
    if await step("is_awake", client.is_sleeping()) is not False:
        raise RestoreFailed("/is_sleeping did not say false after /wake_up")
    await step("reset", client.reset_prefix_cache())
    after = await client.pool_state()
    awake = after.pop("sleep_state", None)
    if awake and awake.get("awake") != 1:
        raise RestoreFailed(f"sleep-state gauge after /wake_up: {awake}")
    if after.get("running") or after.get("kv_cache_usage"):
        raise RestoreFailed(f"the pool is not empty after the restore: {after}")
    return {"means": SLEEP_MEANS, "s": round(time.monotonic() - t0, 4), "steps": steps,
            "discarded_gib": gone, "metrics": after}


async def restore_by_fill(client: EngineClient, poison: dict[str, Any]) -> dict[str, Any]:
    """``--poison`` on: reset the prefix cache, fill the state again (harness/poison.py),
    check the pool is empty; no weights move. A fill that answers but does not prove the
    pattern is kept in ``poison`` (the point is then ``infra``); an RPC that fails is a
    failed restore."""
    from .poison import FILL_MEANS, refill
    t0 = time.monotonic()
    steps: dict[str, float] = {}
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
    after = await client.pool_state()
    after.pop("sleep_state", None)
    if after.get("running") or after.get("kv_cache_usage"):
        raise RestoreFailed(f"the pool is not empty after the restore: {after}")
    return {"means": FILL_MEANS, "s": round(time.monotonic() - t0, 4), "steps": steps,
            "proven": fill["ok"], "metrics": after}


async def _discarded_since(log_path: Path, offset: int) -> float:
    """The GiB the allocator discarded in the sleep just made, from the log after
    ``offset``; waits (bounded) for the line, which the worker writes."""
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        found = discarded_gib(_read_from(log_path, offset))
        if found:
            if found[-1] <= 0:
                raise RestoreFailed(
                    f"the sleep discarded {found[-1]:.2f} GiB: the server was not started with "
                    "--enable-sleep-mode, its KV memory kept its contents")
            return found[-1]
        if time.monotonic() >= deadline:
            raise RestoreFailed(f"no 'CuMemAllocator: sleep freed ...' line in {log_path.name} "
                                f"within {LOG_WAIT_S:g}s of /sleep: the discard is not proven")
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
    import importlib.util
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0]) / "entrypoints"
    for path in root.rglob("*.py"):
        try:
            if '"/is_sleeping"' in path.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False
