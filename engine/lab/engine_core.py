"""Engine core: the step loop (schedule -> execute -> update) and its asyncio front.

Mirrors ``vllm/v1/engine/core.py`` (``EngineCore.step``, the busy loop, and the fatal
error path: an exception in the core kills it, ``EngineDeadError`` reaches every
in-flight request; ``sleep`` / ``wake_up`` / ``is_sleeping``, whose memory side is
``sleep.py``) and ``vllm/v1/engine/async_llm.py`` (per-request output queues, abort
on client disconnect, the sleep-state gauge). vLLM runs the core in its own process; the
lab runs it as one
asyncio task in the server process (a step is tens of microseconds), which keeps boot fast
and the failure path identical from the outside: 500s, ``/health`` failing, and the
process exiting non-zero shortly after.
"""
from __future__ import annotations

import asyncio
import itertools
import sys
import traceback
from typing import AsyncIterator, Callable

import numpy as np

from .block_pool import BlockPool
from .poison import StaleMemory
from .config import LabConfig
from .kv_cache_manager import KVCacheManager
from ._log import log
from .metrics import EngineMetrics
from .model import CopyModel
from .model_runner import ModelRunner
from .request import Request
from .scheduler import Scheduler
from .sleep import MODES, SleepError, SleepState
from .spec_decode import Drafter
from .tokenizer import LabTokenizer


# event-loop turns the API side gets between two engine steps (see AsyncEngine._loop)
API_TURNS_PER_STEP = 4


class EngineDeadError(RuntimeError):
    def __init__(self, msg: str = "EngineCore encountered an issue. See stack trace (above) "
                                  "for the root cause.") -> None:
        super().__init__(msg)


class EngineCore:
    def __init__(self, cfg: LabConfig, tokenizer: LabTokenizer) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.metrics = EngineMetrics(cfg.served_model_name)
        self.pool = BlockPool(cfg.num_gpu_blocks, cfg.block_size, cfg.enable_prefix_caching,
                              cfg.max_num_seqs, cfg.num_spec_tokens,
                              group_id=1 if cfg.geometry == "hybrid" else 0,
                              evict_group_key=cfg.patch_on("evict-group-key"))
        self.kvm = KVCacheManager(
            self.pool, block_size=cfg.block_size, alignment=cfg.effective_hash_unit,
            hybrid=cfg.geometry == "hybrid", enable_caching=cfg.enable_prefix_caching,
            sliding_window_block=cfg.sliding_window_block,
            sliding_window_guard=cfg.patch_on("sliding-window-guard"), metrics=self.metrics,
            drop_eagle_block=cfg.drop_eagle_block, cache_states=cfg.mamba_cache_mode != "none",
            attention_block=cfg.mamba_block_size)
        self.model = CopyModel(tokenizer, tokenizer.nl_id)
        drafter = None
        if cfg.method:
            nd = (cfg.geometry_info.raw.get("drafters", {}).get("ngram", {})
                  if cfg.geometry_info else {})
            spec = cfg.speculative_config or {}
            drafter = Drafter(cfg.method, cfg.num_spec_tokens, self.model, cfg.seed,
                              tokenizer.vocab_size,
                              int(spec.get("prompt_lookup_max") or nd.get("prompt_lookup_max", 4)),
                              int(spec.get("prompt_lookup_min") or nd.get("prompt_lookup_min", 1)))
        self.runner = ModelRunner(cfg, self.pool, self.model, drafter)
        self.scheduler = Scheduler(cfg, self.kvm, self.runner, self.metrics)
        self.sleep = SleepState(cfg, self.pool)
        # the state slots hold per-process boot contents until poisoned (poison.py)
        self.stale = StaleMemory(self.pool, self.runner, tokenizer)

    def add_request(self, req: Request) -> None:
        self.scheduler.add_request(req, paused=self.sleep.paused)

    def abort(self, req_id: str) -> None:
        self.scheduler.abort(req_id)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def step(self):
        so = self.scheduler.schedule()
        if not so.items:
            return []
        outs = self.runner.execute(so.items)
        return self.scheduler.update_from_output(so, outs)

    def reset_prefix_cache(self) -> bool:
        return self.kvm.reset_prefix_cache()


class AsyncEngine:
    """Runs the core's busy loop as an asyncio task; streams outputs per request."""

    def __init__(self, core: EngineCore, on_dead: Callable[[], None] | None = None) -> None:
        self.core = core
        self.queues: dict[str, asyncio.Queue] = {}
        self.dead: BaseException | None = None
        self.on_dead = on_dead
        self._wake: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None   # set whenever the core runs out of work
        self._task: asyncio.Task | None = None
        self._ids = itertools.count()

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        assert self._wake is not None and self._idle is not None
        while True:
            # a paused scheduler queues new requests and steps nothing (vLLM's PAUSED_*)
            if self.core.sleep.paused or not self.core.has_work():
                if not self.core.has_work():
                    self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                results = self.core.step()
            except Exception as e:  # the engine core dies
                self._die(e)
                return
            for req, new, reason in results:
                q = self.queues.get(req.request_id)
                if q is not None:
                    q.put_nowait((new, reason, req))
            # vLLM's API server is another process than its engine core: an HTTP request
            # (an abort, a pause) is parsed and handed over while a step runs, and lands at
            # the next step boundary. Here they share one event loop, and a request takes a
            # few loop turns (bytes read, the app's task started, the handler run): give it
            # those turns between two steps, so a pause or a hang-up lands a step after it
            # arrives, as on vLLM, not one step per turn later
            for _ in range(API_TURNS_PER_STEP):
                await asyncio.sleep(0)

    # -- sleep mode (EngineCore.sleep / wake_up / is_sleeping) --------------------------
    async def sleep(self, level: int, mode: str = "abort") -> None:
        """Pause the scheduler (abort, drain or keep what is in flight), reset the prefix
        cache at level >= 1 (vLLM's ``pause_scheduler(clear_cache=True)``), then let the
        executor sleep: level >= 1 discards the KV memory where sleep mode is on."""
        if mode not in MODES:
            raise SleepError(f"Invalid pause mode: {mode}")
        if self.dead is not None:
            raise EngineDeadError()
        if mode == "wait":   # let what is in flight finish first
            assert self._idle is not None
            while self.core.has_work() and self.dead is None:
                self._idle.clear()
                await self._idle.wait()
        elif mode == "abort":
            for req_id, q in list(self.queues.items()):
                req = self.core.scheduler.requests.get(req_id)
                self.core.abort(req_id)
                if req is not None:
                    q.put_nowait(([], "abort", req))
        self.core.sleep.pause(level)
        if level >= 1:
            self.core.reset_prefix_cache()
            self.core.sleep.release(level)
        self.core.metrics.sleep_level = level

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.core.sleep.wake_up(tags)
        if not self.core.sleep.is_sleeping:
            self.core.metrics.sleep_level = None
            assert self._wake is not None
            self._wake.set()   # requests queued while paused run now

    def is_sleeping(self) -> bool:
        return self.core.sleep.is_sleeping

    def _die(self, e: BaseException) -> None:
        self.dead = e
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        log("ERROR", "core.py:708", "EngineCore encountered a fatal error.\n" + tb.rstrip())
        log("ERROR", "async_llm.py:480", "AsyncLLM output_handler failed.")
        for q in self.queues.values():
            q.put_nowait(EngineDeadError())
        sys.stderr.flush()
        if self.on_dead:
            self.on_dead()

    def request_id(self, base: str | None) -> str:
        """vLLM's ``chatcmpl-<X-Request-Id or request_id>``; a counter where none is given,
        or where that id is still in flight."""
        rid = f"chatcmpl-{base}" if base else f"chatcmpl-{next(self._ids):08x}"
        while rid in self.queues:
            rid = f"{rid}-{next(self._ids):x}"
        return rid

    async def generate(self, prompt_ids: np.ndarray, max_tokens: int,
                       num_logprobs: int | None = None, ignore_eos: bool = False,
                       request_id: str | None = None, num_prompt_logprobs: int | None = None
                       ) -> AsyncIterator[tuple[list[int], str | None, Request]]:
        if self.dead is not None:
            raise EngineDeadError()
        req_id = request_id or self.request_id(None)   # request_id: from request_id()
        # vLLM's SamplingParams.ignore_eos: the stop tokens do not end the request
        stops = () if ignore_eos else self.core.tokenizer.stop_token_ids
        req = Request(req_id, prompt_ids, max_tokens, stops,
                      num_logprobs)
        req.num_prompt_logprobs = num_prompt_logprobs
        q: asyncio.Queue = asyncio.Queue()
        self.queues[req_id] = q
        finished = False
        try:
            self.core.add_request(req)
            assert self._wake is not None
            self._wake.set()
            while True:
                item = await q.get()
                if isinstance(item, BaseException):
                    raise item
                new, reason, r = item
                finished = reason is not None
                yield new, reason, r
                if finished:
                    return
        finally:
            self.queues.pop(req_id, None)
            if not finished and self.dead is None:
                self.core.abort(req_id)
