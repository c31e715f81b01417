"""Model runner: the persistent batch, input preparation, cudagraph dispatch by batch
shape, the forward pass, rejection sampling and drafting.

Mirrors ``vllm/v1/worker/gpu_model_runner.py`` (``_prepare_inputs``, the uniform-decode
check that picks the cudagraph runtime mode, ``execute_model``, ``propose_draft_token_ids``),
``vllm/v1/cudagraph_dispatcher.py`` (``CudagraphDispatcher.dispatch``) and
``vllm/v1/sample/rejection_sampler.py`` (greedy verification of 1 + k tokens).

The bug class lives in ``dispatch``: a batch is a *uniform decode* batch by shape alone
(every request has exactly 1 + k scheduled tokens). With FULL graphs for decode
(FULL / FULL_DECODE_ONLY / FULL_AND_PIECEWISE) such a batch replays the *captured
spec-verify plan*. A replayed graph does not read what the scheduler scheduled: it reads
the persistent per-row decode inputs (the last sampled token and the drafts, staged only
for rows that are decoding) and writes them at the positions a decode step writes, and it
advances the recurrent state over them as a verify step does. For decode rows that is
exactly the eager computation. For a row whose *final prefill chunk* happens to be
1 + k tokens (a prefix-cache hit leaves tail = len - hit), the row's staging buffers hold
whatever the row's previous occupant last decoded: the last 1 + k KV slots and the
recurrent state are written from the wrong tokens, and the answer follows from that.

The staging buffers are the row's *state slot* and live in the KV pool
(``BlockPool.slot_last`` / ``slot_drafts``), as the mamba state a vLLM hybrid's replayed
verify graph reads (through ``spec_state_indices_tensor``, a persistent index that
``GDNAttentionMetadataBuilder.build`` refreshes only for spec-decode batches) sits in the
KV cache tensor. Hence a fresh server's first replay reads what its boot left (per process,
or the pattern once poisoned: poison.py), a reused server's reads
what it served last (``/reset_prefix_cache`` does not touch it: the answer at a Bug B cell
depends on the server's history), and a server woken from sleep level 1 reads its boot
contents again.
The ``prefill-discriminator`` patch adds the missing condition: no scheduled request may
still be in prefill (vLLM's V2 runner checks ``num_computed < prefill_len``).
PIECEWISE and NONE never replay the captured plan.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from .batch_layout import read_rows
from .block_pool import BlockPool
from .config import FULL_DECODE_MODES, LabConfig
from .model import CopyModel, SeqView, State, logprobs_of
from .prompt_logprobs import prompt_logprobs
from .request import Request
from .sched_log import log_final_chunks
from .spec_decode import Drafter

CAPTURED, EAGER = "FULL", "PIECEWISE"


@dataclass
class RunnerOutput:
    emitted: list[int]          # sampled tokens (empty for a non-final prefill chunk)
    num_inputs_accepted: int    # scheduled inputs whose KV/state is now valid
    num_accepted_drafts: int
    state: State
    snapshots: dict[int, State] = field(default_factory=dict)
    drafts: list[int] = field(default_factory=list)
    # per emitted token, where the request asked for logprobs: [(token, logprob)], best first
    logprobs: list[list[tuple[int, float]]] | None = None


def compile_lanes(seed: int, lanes: int) -> np.ndarray:
    """Which of the captured verify plan's ``lanes`` (1 + k) input lanes one "compile" fused
    with the step's prepared input buffer instead of reading the row's persistent staging
    (issue 48). A real compile picks its own fusions and layouts; here the choice is seeded
    (``--compile-seed``; 0: none fused, the lab before issue 48) and never fuses every
    lane. For a decode row staging and prepared input hold the same tokens, so every compile
    answers alike; a prefill tail replaying the plan mixes its real tokens with stale ones
    (the boot's contents or the poison's pattern) in the compile's proportions: other broken
    bytes per compile, the same on every server of one compile."""
    if seed == 0 or lanes < 2:
        return np.zeros(lanes, dtype=bool)
    live = np.random.default_rng(seed).random(lanes) < 0.5
    live[0] = False      # at least the last token's lane reads the staging
    return live


def lanes_fingerprint(live: np.ndarray) -> str:
    """The lab compile's fingerprint: a digest of its artefact (which lanes are fused), so
    two seeds that compile the same plan share it."""
    import hashlib
    word = "".join("1" if x else "0" for x in live.tolist())
    return hashlib.sha1(f"lab-plan:{word}".encode()).hexdigest()[:12]


class ModelRunner:
    def __init__(self, cfg: LabConfig, pool: BlockPool, model: CopyModel,
                 drafter: Drafter | None) -> None:
        self.cfg = cfg
        self.k = cfg.num_spec_tokens if drafter else 0
        self.bs = cfg.block_size
        self.kv_tok, self.kv_pos = pool.kv_tok, pool.kv_pos
        self.model, self.drafter = model, drafter
        self.full_decode = cfg.cudagraph_mode in FULL_DECODE_MODES
        self.discriminator = cfg.patch_on("prefill-discriminator")
        self.row_offsets_patch = cfg.patch_on("prefill-row-offsets")
        self.snapshot_every = (cfg.effective_hash_unit
                               if cfg.geometry == "hybrid" and cfg.enable_prefix_caching else 0)
        # align mode: the state is only materialised where a chunk ends on a cacheable
        # position (a mamba block boundary, or the prompt's last hash boundary)
        self.align_block = cfg.mamba_block_size if cfg.align_mode else None
        # mode all: a prefill chunk's states land where its kernel chunks end (mamba_chunks);
        # the scheduler sets it (None: decode steps, dense, no caching, mode none)
        self.chunk_states = None
        self.rows: dict[str, int] = {}
        self.free_rows = list(range(cfg.max_num_seqs))
        # Persistent per-row decode inputs, what a replayed verify graph reads: the rows'
        # state slots in the KV pool (views: sleep empties them in place).
        assert len(pool.slot_last) >= cfg.max_num_seqs
        self.stage_last, self.stage_drafts = pool.slot_last, pool.slot_drafts
        # issue 48: which of the plan's 1 + k input lanes this compile fused with the
        # prepared input (the rest read the row's staging)
        self.live_lanes = compile_lanes(cfg.compile_seed, 1 + self.k)
        self.compile_fingerprint = lanes_fingerprint(self.live_lanes)
        self.dispatch_counts = {CAPTURED: 0, EAGER: 0}

    # -- persistent batch ---------------------------------------------------------------
    def release(self, req_id: str) -> None:
        row = self.rows.pop(req_id, None)
        if row is not None:
            heapq.heappush(self.free_rows, row)

    def _row(self, req: Request) -> int:
        row = self.rows.get(req.request_id)
        if row is None:
            row = heapq.heappop(self.free_rows)
            self.rows[req.request_id] = row
        return row

    # -- dispatch -----------------------------------------------------------------------
    def dispatch(self, items: list[tuple[Request, int, list[int]]]) -> str:
        if not (self.k and self.full_decode):
            return EAGER
        num_tokens = sum(n for _, n, _ in items)
        max_query = max(n for _, n, _ in items)
        uniform_decode = max_query == 1 + self.k and num_tokens == len(items) * max_query
        if uniform_decode and self.discriminator:
            uniform_decode = not any(req.is_prefill for req, _, _ in items)
        if uniform_decode and num_tokens <= self.cfg.max_cudagraph_capture_size:
            return CAPTURED
        return EAGER

    # -- execute ------------------------------------------------------------------------
    def execute(self, items: list[tuple[Request, int, list[int]]]) -> dict[str, RunnerOutput]:
        bs = self.bs
        rows = [self._row(req) for req, _, _ in items]
        for (req, n, spec), row in zip(items, rows):
            if not req.is_prefill:  # stage the decode inputs of decoding rows
                self.stage_last[row] = req.last_token()
                if spec:
                    self.stage_drafts[row, :len(spec)] = spec
        plan = self.dispatch(items)
        self.dispatch_counts[plan] += 1
        log_final_chunks(items, plan)

        prefill = iter(read_rows([req.token_array()[req.num_computed_tokens:
                                                    req.num_computed_tokens + n]
                                  for req, n, _ in items if req.is_prefill],
                                 self.bs, self.row_offsets_patch) if plan != CAPTURED else [])
        inputs = []
        for (req, n, spec), row in zip(items, rows):
            start = req.num_computed_tokens
            if req.is_prefill and plan != CAPTURED:
                toks = next(prefill)   # the flat batch buffer (batch_layout.py)
            elif req.is_prefill:       # the captured plan: its live lanes read these
                toks = req.token_array()[start:start + n]
            else:
                toks = np.asarray([req.last_token()] + spec, dtype=np.int32)
            if plan == CAPTURED:   # decode rows staged exactly their inputs: no lane differs
                staged = np.concatenate(([self.stage_last[row]], self.stage_drafts[row, :self.k]))
                toks = np.where(self.live_lanes, toks, staged).astype(np.int32)
            pos = np.arange(start, start + n)
            slots = req.block_table[pos // bs].astype(np.int64) * bs + pos % bs
            self.kv_tok[slots] = toks
            self.kv_pos[slots] = pos
            inputs.append(toks)

        outs: dict[str, RunnerOutput] = {}
        for (req, n, spec), toks in zip(items, inputs):
            outs[req.request_id] = self._forward(req, n, spec, toks, plan)
        return outs

    def boundaries(self, req: Request, start: int, n: int) -> list[int]:
        u = self.snapshot_every
        if not u:
            return []
        if self.chunk_states is not None and req.is_prefill:
            return self.chunk_states.boundaries(start, n)
        if self.align_block:
            end, block = start + n, self.align_block
            tail = req.num_prompt_tokens // u * u if u < block else -1
            return [end] if end % u == 0 and (end % block == 0 or end == tail) else []
        first = (start // u + 1) * u
        return list(range(first, start + n + 1, u))

    def _forward(self, req: Request, n: int, spec: list[int], toks: np.ndarray,
                 plan: str) -> RunnerOutput:
        model = self.model
        start = req.num_computed_tokens
        view = SeqView(self.kv_tok, self.kv_pos, req.block_table, self.bs, start + n)
        if req.state is None:
            # No recurrent snapshot (dense geometry, or a fresh request): everything the
            # model knows about the cached prefix is in its KV slots; derive the state
            # bookkeeping from them, read through the block table.
            req.state = State()
            if start:
                model.advance(req.state, view, 0, view.tokens(start), [])
        boundaries = self.boundaries(req, start, n)
        prefill_end = start + n >= req.num_prompt_tokens and not req.output_token_ids
        a = 0
        if plan == CAPTURED or not req.is_prefill:
            # verify kernel: every position is computed, states kept per position
            s = req.state.copy()
            states, outs = [], []
            for i in range(n):
                x = int(toks[i])
                model.step(s, view, x, start + i)
                outs.append(model.next_token(s, view, x, start + i))
                states.append(s.copy())
            if req.is_prefill:  # the scheduler's view: a prefill chunk, all of it computed
                accepted = n
                emitted = [outs[-1]] if prefill_end else []
            else:               # rejection sampling (greedy): accept drafts the target agrees with
                while a < len(spec) and spec[a] == outs[a]:
                    a += 1
                accepted = a + 1
                emitted = outs[:a + 1]
            state = states[accepted - 1]
            snaps = {b: states[b - start - 1] for b in boundaries if b - start <= accepted}
            first = n - 1 if req.is_prefill else 0  # position index of emitted[0]
            scored = [(states[first + j], int(toks[first + j]), start + first + j)
                      for j in range(len(emitted))]
        else:
            state = req.state.copy()
            snaps = model.advance(state, view, start, toks, boundaries)
            accepted = n
            emitted = ([model.next_token(state, view, int(toks[-1]), start + n - 1)]
                       if prefill_end else [])
            scored = [(state, int(toks[-1]), start + n - 1)] if emitted else []
        out = RunnerOutput(emitted, accepted, a, state, snaps)
        if prefill_end and req.num_prompt_logprobs is not None:
            req.prompt_logprobs = prompt_logprobs(model, view, req.prompt_token_ids,
                                                  req.resumed_at, req.resumed_state,
                                                  req.num_prompt_logprobs)
        if req.num_logprobs is not None:
            # read-only: the head's votes at the very states and slots that chose each token
            out.logprobs = [logprobs_of(model.votes(st, view, x, p)) for st, x, p in scored]
        if emitted and self.drafter is not None:
            pos = start + accepted  # position of the token just sampled
            limit = self.cfg.max_model_len - pos - 1
            tokens = None
            if self.drafter.method == "ngram":
                tokens = np.concatenate((req.token_array(), np.asarray(emitted, dtype=np.int32)))
            out.drafts = self.drafter.propose(state, view, emitted[-1], pos, tokens, limit)
        return out
