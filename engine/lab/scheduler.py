"""Scheduler: which requests run this step and with how many tokens.

Mirrors ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule`` and
``update_from_output``): one token budget per step (``--max-num-batched-tokens``); running
requests first (a decoding request asks for 1 + its draft tokens, a prefilling one for
the rest of its prompt, chunked to the budget), then waiting requests, whose prefix-cache
hit is looked up once, on first scheduling: only the uncached tail is computed. Slots for
k lookahead tokens are reserved for drafts. When the pool runs out, the newest running
request is preempted (freed and recomputed later). After the step, outputs are appended,
stop/length checks run, full blocks enter the prefix cache, and spec-decode counters move.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .config import EAGLE_STYLE_METHODS, LabConfig
from ._log import log
from .kv_cache_manager import KVCacheManager
from .mamba_align import AlignStateBlocks
from .mamba_chunks import PATCH as CHUNK_GRID, ChunkStateBlocks
from .metrics import EngineMetrics
from .model_runner import ModelRunner, RunnerOutput
from .request import FINISHED, RUNNING, WAITING, Request
from .sched_log import log_abort, log_chunks, log_evicted, log_queued


def mamba_aligned_chunk(req: Request, start: int, n: int, block: int, hash_unit: int,
                        use_eagle: bool, max_chunk: int) -> int:
    """Clip a prefill chunk of n tokens from ``start`` so it ends where align mode can cache
    the recurrent state: vLLM 0.26.0's ``Scheduler._mamba_block_aligned_split``.

    A chunk that is not the last ends on a block boundary; no chunk runs past the last
    cacheable block boundary (one block earlier with an EAGLE-style drafter, whose hit drops
    a block) or, when the hash unit is finer than the block, past the prompt's last hash
    boundary. So the final chunk of a cold prompt is ``len mod hash unit`` tokens: with
    len = k + 1 (mod unit) it is the 1 + k chunk Bug B needs, without any cache hit.
    """
    prefill_end = req.prefill_target
    if start >= prefill_end:
        return n
    last_cache = req.num_tokens - req.num_tokens % block
    if use_eagle:
        last_cache = max(last_cache - block, 0)
    end = start + n
    if end < prefill_end:
        aligned = end // block * block
        if aligned > start or block <= max_chunk:
            end = aligned
    tail = req.num_prompt_tokens // hash_unit * hash_unit if hash_unit < block else 0
    stops = ((start // block + 1) * block if start % block else 0,
             last_cache,
             tail if last_cache < tail < req.num_prompt_tokens else 0)
    end = min((x for x in stops if start < x < end), default=end)
    return max(end - start, 0)


@dataclass
class SchedulerOutput:
    items: list[tuple[Request, int, list[int]]] = field(default_factory=list)


class Scheduler:
    def __init__(self, cfg: LabConfig, kvm: KVCacheManager, runner: ModelRunner,
                 metrics: EngineMetrics) -> None:
        self.cfg = cfg
        self.kvm = kvm
        self.runner = runner
        self.metrics = metrics
        self.k = runner.k
        self.align_block = cfg.mamba_block_size if cfg.align_mode else None
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.step_no = 0   # steps that ran something (the trace's step=)
        # align mode: state blocks published at schedule time, written a step later
        self.align = (AlignStateBlocks(kvm.pool, cfg.block_size,
                                       cfg.patch_on("align-publish-after-copy"))
                      if self.align_block is not None and cfg.enable_prefix_caching else None)
        kvm.align = self.align
        # mode all: a prefill chunk's states written per kernel chunk, cached once full
        self.chunk_states = (ChunkStateBlocks(kvm.pool, cfg.block_size, cfg.effective_hash_unit,
                                              cfg.patch_on(CHUNK_GRID))
                             if (cfg.geometry == "hybrid" and cfg.enable_prefix_caching
                                 and cfg.mamba_cache_mode == "all") else None)
        runner.chunk_states = self.chunk_states

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add_request(self, req: Request, paused: bool = False) -> None:
        """Queued; the gauges follow unless scheduling is paused: vLLM publishes them from
        a step's stats (v1/engine/core.py ``step``), and a paused scheduler steps nothing."""
        self.kvm.update_block_hashes(req)
        self.requests[req.request_id] = req
        self.waiting.append(req)
        log_queued(req, len(self.waiting), paused)
        if not paused:
            self._gauges()

    def abort(self, req_id: str) -> None:
        req = self.requests.get(req_id)
        if req is None or req.status == FINISHED:
            return
        if req.status == WAITING:
            self.waiting.remove(req)
        log_abort(req, self.step_no)
        self._finish(req, "abort")
        self._gauges()   # an abort can leave the engine idle: no step would update them

    def _finish(self, req: Request, reason: str) -> None:
        req.status = FINISHED
        req.finish_reason = reason
        if req in self.running:
            self.running.remove(req)
        self.kvm.free(req)
        self.runner.release(req.request_id)
        self._forget_states(req)
        self.requests.pop(req.request_id, None)
        self.metrics.request_success[reason] = self.metrics.request_success.get(reason, 0) + 1

    def _preempt(self, req: Request) -> None:
        # vLLM's Scheduler._preempt_request: freed, recomputed from scratch later
        self.metrics.num_preemptions += 1
        log("INFO", "scheduler.py:0", f"preempted request={req.request_id} "
            f"computed={req.num_computed_tokens} (recomputed when resumed)")
        self.running.remove(req)
        self.kvm.free(req)
        self.runner.release(req.request_id)
        self._forget_states(req)
        req.num_computed_tokens = 0
        req.num_cached_tokens = max(req.num_cached_tokens, 0)
        req.spec_token_ids = []
        req.state = None
        req.status = WAITING
        self.waiting.appendleft(req)

    def _forget_states(self, req: Request) -> None:
        for states in (self.align, self.chunk_states):
            if states is not None:
                states.forget(req.request_id)

    def _gauges(self) -> None:
        self.metrics.num_requests_running = len(self.running)
        self.metrics.num_requests_waiting = len(self.waiting)
        self.metrics.kv_cache_usage = self.kvm.pool.usage()

    # -- schedule -----------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.cfg.max_num_batched_tokens
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            if req.num_computed_tokens < req.prefill_target:
                n = self._prefill_chunk(req, req.num_computed_tokens, budget)
                spec: list[int] = []
                if n == 0:  # no room for a block-aligned chunk this step
                    i += 1
                    continue
            else:
                spec = req.spec_token_ids[:max(0, budget - 1)]
                n = 1 + len(spec)
            while not self._allocate(req, n):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is req:
                    break
            else:
                out.items.append((req, n, spec))
                budget -= n
                i += 1
                continue
            break  # req itself was preempted
        while (self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs):
            req = self.waiting[0]
            blocks, hit, snapshot = self.kvm.get_computed_blocks(req)
            target = req.prefill_target
            if target - hit <= 0:
                blocks, hit, snapshot = [], 0, None
            n = self._prefill_chunk(req, hit, budget)
            if n == 0:
                break
            if not self._allocate(req, n, blocks):
                break
            self.waiting.popleft()
            req.num_computed_tokens = hit
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = hit
            req.state = snapshot  # None: the runner derives it from the cached slots
            if req.num_prompt_logprobs is not None and not req.output_token_ids:
                req.resumed_at = hit
                req.resumed_state = snapshot.copy() if snapshot is not None else None
            req.status = RUNNING
            self.running.append(req)
            out.items.append((req, n, []))
            budget -= n
        self._scheduled(out.items)
        return out

    def _scheduled(self, items) -> None:
        """The step's trace lines, align mode's publication, counters and gauges."""
        if items:
            self.step_no += 1
            log_chunks(items, self.step_no)
            self._publish_states(items)
        for req, n, spec in items:
            if spec:
                self.metrics.spec_decode_num_drafts += 1
                self.metrics.spec_decode_num_draft_tokens += len(spec)
            if req.is_prefill:
                self.metrics.prompt_tokens += min(n, req.num_prompt_tokens - req.num_computed_tokens)
        self._gauges()

    def _allocate(self, req: Request, n: int, blocks: list[int] | None = None) -> bool:
        ok = self.kvm.allocate_slots(req, n, self.k, blocks)
        pool = self.kvm.pool
        if pool.evicted:
            log_evicted(pool.evicted, req.request_id, self.step_no + 1)
            pool.evicted = []
        return ok

    def _publish_states(self, items) -> None:
        """Align mode: the mamba group's blocks are cached at allocation (see mamba_align)."""
        if self.align is None:
            return
        for req, n, _ in items:
            if req.is_prefill:
                start = req.num_computed_tokens
                self.align.schedule(req, start + n, bool(self.runner.boundaries(req, start, n)))
        # the runner's preprocess_mamba at the start of this step: last step's states land
        self.align.copy_pending([req.request_id for req, _, _ in items])

    def _prefill_chunk(self, req: Request, start: int, budget: int) -> int:
        n = min(req.prefill_target - start, budget)
        if self.align_block is None:
            return n
        return mamba_aligned_chunk(req, start, n, self.align_block, self.cfg.effective_hash_unit,
                                   self.cfg.method in EAGLE_STYLE_METHODS,
                                   self.cfg.max_num_batched_tokens)

    # -- outputs ------------------------------------------------------------------------
    def update_from_output(self, so: SchedulerOutput, outs: dict[str, RunnerOutput]
                           ) -> list[tuple[Request, list[int], str | None]]:
        results = []
        max_len = self.cfg.max_model_len
        for req, n, spec in so.items:
            o = outs[req.request_id]
            start, was_prefill = req.num_computed_tokens, req.is_prefill
            req.num_computed_tokens += o.num_inputs_accepted
            req.state = o.state
            if spec:
                self.metrics.spec_decode_num_accepted_tokens += o.num_accepted_drafts
            new: list[int] = []
            reason = None
            for i, t in enumerate(o.emitted):
                req.output_token_ids.append(t)
                if o.logprobs is not None:
                    req.output_logprobs.append(o.logprobs[i])
                new.append(t)
                if t in req.stop_token_ids:
                    reason = "stop"
                elif len(req.output_token_ids) >= req.max_tokens or req.num_tokens >= max_len:
                    reason = "length"
                if reason:
                    break
            self.metrics.generation_tokens += len(new)
            self.kvm.cache_blocks(req)
            if self.align is not None:
                self.align.computed(req, o.snapshots)
            elif self.chunk_states is not None and was_prefill:
                self.chunk_states.computed(req, start, o.num_inputs_accepted, o.snapshots)
            elif o.snapshots:
                self.kvm.store_snapshots(req, o.snapshots)
            if reason:
                self._finish(req, reason)
            else:
                room = max_len - req.num_tokens
                req.spec_token_ids = o.drafts[:max(0, room)] if new else []
            results.append((req, new, reason))
        self._gauges()
        return results
