"""The ``--history`` names: what the server did right before the measured request (issue 52).

One row per history in ``HISTORIES``: what runs before the measured request, which phase it
precedes, what proves it happened, which report or lab mechanism it targets, what it cannot
see, what the Bug B rule predicts for it, whether a shared live server (``--url``) can prove
it, and what its servers need (a chunk budget, a small KV pool). The code that *drives* a
history is ``run/history.py`` (a table of drivers keyed by these names); the proof it
leaves in a record is ``HistoryProof`` (a frozen shape that round-trips a record's
``history`` key exactly, as ``PhaseRecord`` does a record). ``--phases warm`` and
``--load N --load-mode cancel`` stay flags of their own: they are histories of a kind, but
they change what runs *beside* or *as* a phase, not before it, and folding them in made the
model larger, not simpler.

Leaf module: imports nothing of the harness.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

__all__ = ["History", "HISTORIES", "HISTORY_NAMES", "NONE", "history_row", "HistorySend",
           "HistoryProof", "ABORT_CHUNK_BUDGET", "SIBLING_BUDGET_PROMPTS",
           "EVICT_POOL_PROMPTS", "COLD_CONTROL"]

NONE = "none"
# abort-retry: the chunked-prefill budget its servers get when the sweep sets none: the
# lab hybrid's mamba (page) block at k = 3, block 128, so that every chunk ends where align
# mode publishes a state block (vllm PR #56525); on vLLM give the model's own mamba block
# with --max-num-batched-tokens. A prompt of the default --context (4,096) is 3 chunks
ABORT_CHUNK_BUDGET = 2048
# sibling: the budget its servers get when the sweep sets none, in measured prompts: two of
# residue 0's templated length (--context rounded to the hash unit; settings/configs.history_server): at
# residue 0 both prompts are prefilled whole in the step they share (the lab's
# prefill-row-offsets cell: the first row's chunk a whole number of blocks); at a residue
# whose prompt is longer, L(sibling) < B < L(sibling) + L(measured) with B a multiple of
# the unit, so the measured prefill is split off the block grid, B - L(sibling) tokens in
# the shared step and the rest in the next (vllm PR #34587's chunk that starts mid-block;
# the lab2 note of /work/notes/history-contract.md)
SIBLING_BUDGET_PROMPTS = 2
# evict: the KV pool its servers get when the sweep sets none, in measured prompts (the
# prompt + its answer): room for the measured prompt and one unrelated prompt beside it,
# so that a few unrelated prompts evict every block of it
EVICT_POOL_PROMPTS = 2.5
# next-turn: the role of its cold control, the new turn sent again once the measured send is
# answered, on an emptied prefix cache (cached_tokens 0 proves it cold): the cold phase
# answered another prompt (the first turn), and a model trained on single-turn prompts may
# answer the two-turn one with the first turn's passage even cold (vLLM 0.26.0, the tiny
# hybrid, H100, 2026-12-06): the passage alone would call that a cache divergence
COLD_CONTROL = "cold-control"


@dataclass(frozen=True)
class History:
    name: str
    before: str          # what runs before the measured request
    at: str | None       # the phase it precedes (or runs beside / replaces); None: nothing
    proof: str           # what proves, per point, that it happened as planned
    targets: str         # the report / lab mechanism it is built for
    blind: str           # what it cannot see
    rule: str            # what the Bug B rule predicts under it
    live_ok: bool        # a shared live server (--url) can prove it
    chunk_budget: int | None = None      # its servers' --max-num-batched-tokens, if unset
    pool_prompts: float | None = None    # its servers' KV pool in measured prompts, if unset
    # on a real engine (vLLM), whose align-mode state block is the KV block (vLLM 0.26.0
    # model_executor/models/config.py: mamba_block_size = block_size), the budget as this
    # share of the measured context in whole KV blocks instead of chunk_budget (the lab's
    # state block is 2048 at k = 3). Not one block: vLLM promotes a hybrid's block until
    # an attention page holds a state page (platforms/interface.py
    # update_block_size_for_backend: 256 for the tiny hybrid at k = 3) and align mode
    # asserts block <= budget (config/vllm.py); half a prompt is far above any promotion
    engine_budget_share: float | None = None
    budget_prompts: int | None = None    # its servers' budget in measured prompts, if unset
    align_mode: bool = False   # its servers run a hybrid's state cache in align mode (the
                               # lab's default is ``all``; vLLM's hybrids run align always)


HISTORIES: tuple[History, ...] = (
    History(NONE, "nothing: the fresh server's phases as --phases says", None,
            "the phases' own checks (cached_tokens 0 cold, a proven hit)",
            "Bug B and the shapes of docs/shapes.md", "every bug that needs a history",
            "as the rule says for the configuration", True),
    History("abort-retry", "the measured prompt sent as a stream; once the server's log "
            "shows its first prefill chunk, scheduling is paused (/sleep?level=0&mode=keep), "
            "the client hangs up, the abort line is awaited, scheduling resumes (/wake_up), "
            "and the prompt is sent again: the retry is the measured cold phase", "cold",
            "the server's trace: a prefill chunk of the aborted request, then its abort line "
            "with 0 < computed < prompt (mid-prefill: the pause lands a step or two after the "
            "first chunk line, so the prompt needs a few chunks: the lab at --context 16384, "
            "vLLM at a budget of half the context in whole KV blocks); the retry's cached_tokens (what the aborted "
            "prefill left cached)",
            "vllm PR #56525 (align-mode state hashes published at schedule time, an abort "
            "before the write); sglang #23392 (cancel + retry)",
            "an abort at any other chunk than the pause leaves; aborts of other clients' "
            "requests; an abort while steps run (the pause holds them)",
            "#56525 (lab, unpatched, align mode, ngram or no spec): the retry (and the "
            "self-hit after it) reads the state block the aborted prefill published but never "
            "wrote: broken (answer '', cached_tokens = the abort's computed) at EVERY residue "
            "whose abort is proven mid-prefill; align-publish-after-copy or all: clean; MTP / "
            "DFlash drop the last matched block: nothing. Bug B: the retry's final chunk is L "
            "minus its hit, cut by the chunk budget, as the rule line says", False,
            chunk_budget=ABORT_CHUNK_BUDGET, engine_budget_share=0.5, align_mode=True),
    History("interleave", "A (the cold phase), then B: A's conversation, a short reply and "
            "a different document as the next turn, then A again: the A-B-A pattern",
            "self-hit", "B's cached_tokens: a positive multiple of the hash unit (B's prompt "
            "begins with A's, so B hit A's blocks); the order of sends; A's hit after B",
            "A-B-A prefix patterns; a stale block B's prefill overwrote (B recomputes A's "
            "partial last block)",
            "a B that shares less of A (in vLLM's align mode a hybrid's state is cached only "
            "where a scheduled chunk ended: a B sharing half of A hits nothing; MTP / DFlash "
            "drop the last matched block, which there is A's only one)",
            "no lab mechanism (the lab's fixes change nothing here): A's resend is a hit, "
            "residue k+1 as for any hit (Bug B)", False),
    History("sibling", "another cold prefill (another document, the measured prompt's "
            "templated length) sent first, the measured cold request while it waits, both "
            "scheduled in one step (the server paused until both wait, where it can pause)",
            "cold",
            "the server's trace: a prefill chunk of each with one step= (else the final-chunk "
            "lines: the measured one, or the sibling's before it, with prefill_reqs >= 2)", "sglang #22819 (prefix length == page size, "
            "corrupt only beside another request in one batch)",
            "steps the measured final chunk did not share; a server that writes no trace",
            "row offsets (lab, prefill-row-offsets off): the cold phase broken where both "
            "prompts are prefilled whole in the shared step and the sibling's chunk is a "
            "whole number of blocks: residue 0 (the budget is two residue-0 prompts); "
            "#34587 (lab, --mamba-cache-mode all, mamba-chunk-grid off): the measured "
            "prompt split off the block grid (B - L(sibling) tokens in the shared step, not a "
            "multiple of the unit), its self-hit broken (answer '', cached_tokens L rounded "
            "down to the unit) where that hit exceeds B - L(sibling): every residue whose "
            "templated length exceeds residue 0's; all: clean; vLLM (align mode): nothing. "
            "Bug B: nothing for the cold phase (a step with two prefills is not "
            "shape-uniform), the self-hit as none", False,
            budget_prompts=SIBLING_BUDGET_PROMPTS),
    History("evict", "the measured prompt served (cold), then unrelated prompts until "
            "their tokens exceed the KV pool, then the measured prompt again (measured)",
            "self-hit", "the server's eviction lines naming the measured prompt's blocks "
            "(a full hit then is the finding: a phantom hit); without such lines, the "
            "measured send's cached_tokens: a miss or a partial hit, never the whole",
            "stale hits after eviction under churn (local-inference-lab/vllm #480; vllm "
            "#50702's pinned pool with eviction active)",
            "preemption of a running request (nothing runs beside it)",
            "phantom hit (lab hybrid, evict-group-key off): the self-hit reports a full hit "
            "although the eviction lines name its blocks, broken at EVERY residue; "
            "evict-group-key or all, and dense: a miss or a partial hit, clean. Bug B: "
            "a miss prefills the whole prompt (the cold rule: only a chunk budget cuts a "
            "final chunk); a partial hit's final chunk is L minus the hit, k+1 tokens only "
            "where that is under one unit: the record's computed_tail says which", False,
            pool_prompts=EVICT_POOL_PROMPTS),
    History("next-turn", "the conversation continued: the first turn answered (the cold "
            "phase), then its answer and a new user turn appended; the new turn's "
            "templated length hits the residue (measured in the self-hit phase)",
            "self-hit", "the new turn's templated length by /tokenize; its cached_tokens: a "
            "hit on the previous turn (> 0) plus a tail; then the new turn's cold control "
            "(sent again on an emptied prefix cache, cached_tokens 0): where it does not "
            "answer the passage (a model that cannot answer a second turn), or under "
            "--reference cold, the measured answer is judged against it",
            "the agent / chat pattern: a hit on the previous turn plus a tail",
            "turns whose answer differs from the passage (the next turn is built from it)",
            "the residue is of the new turn's templated length L2; its hit covers the previous "
            "turn in whole hash units, so its final chunk (L2 minus the hit) is congruent to "
            "L2 but is k+1 tokens only where the new turn adds under one unit past the hit: "
            "with the document-sized new turn this sweeps, it predicts nothing for the "
            "measured phase (the cold first turn as none); no lab mechanism", False),
)

HISTORY_NAMES: tuple[str, ...] = tuple(h.name for h in HISTORIES)
_BY_NAME = {h.name: h for h in HISTORIES}


def history_row(name: str | None) -> History:
    """The row of ``name`` (``None`` is ``none``); KeyError for a name not in the table."""
    return _BY_NAME[name or NONE]


class _RoundTrip:
    """A frozen record shape read from and written back to its JSON exactly: the keys it
    does not name kept in ``extra``, the file's key order kept in ``_keys``."""

    @classmethod
    def _names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "extra" and not f.name.startswith("_")]

    def as_dict(self) -> dict[str, Any]:
        names = self._names()
        vals = {n: _plain(getattr(self, n)) for n in names}
        extra: dict = self.extra   # type: ignore[attr-defined]
        order = self._keys or tuple(names)   # type: ignore[attr-defined]
        out = {k: vals[k] if k in vals else extra[k] for k in order if k in vals or k in extra}
        if not self._keys:   # type: ignore[attr-defined]  (one read keeps what it had)
            out.update((k, v) for k, v in vals.items() if k not in out)
        out.update((k, v) for k, v in extra.items() if k not in out)
        return out

    @classmethod
    def _read(cls, d: Mapping[str, Any], convert: Mapping[str, Any]):
        names = cls._names()
        known = {n: convert.get(n, lambda v: v)(d[n]) for n in names if n in d}
        obj = cls(**known, extra={k: v for k, v in d.items() if k not in names})
        object.__setattr__(obj, "_keys", tuple(d))
        return obj


def _plain(v: Any) -> Any:
    if isinstance(v, _RoundTrip):
        return v.as_dict()
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


@dataclass(frozen=True)
class HistorySend(_RoundTrip):
    """One request the history sent before (or beside) the measured one, as the server
    answered it."""

    role: str                          # aborted, retry, B, evictor, sibling, turn-1, ...
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    request_id: str | None = None
    finish_reason: str | None = None   # "abort": cut by the client
    extra: dict = field(default_factory=dict, compare=False)
    _keys: tuple = field(default=(), compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HistorySend":
        return cls._read(d, {})


@dataclass(frozen=True)
class HistoryProof(_RoundTrip):
    """What a record's ``history`` key holds: the history that ran, the phase it preceded,
    whether it is proven (``proven`` false makes the phase ``invalid`` with ``reason``),
    the sends in their order, the server's trace lines and /metrics deltas that prove it,
    and what it found (``finding``: e.g. ``partial hit 2048 of 4100``)."""

    name: str
    at: str
    proven: bool
    reason: str
    sends: tuple[HistorySend, ...] = ()
    log: tuple[str, ...] = ()
    metrics: dict = field(default_factory=dict)
    finding: str | None = None
    extra: dict = field(default_factory=dict, compare=False)
    _keys: tuple = field(default=(), compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HistoryProof":
        return cls._read(d, {
            "sends": lambda v: tuple(HistorySend.from_dict(s) for s in v),
            "log": tuple})

