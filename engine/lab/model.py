"""The lab copy model: a deterministic hybrid (recurrent state + attention) whose next
token is computed from what is stored in the request's KV slots.

Mirrors the *forward pass* of a hybrid model such as vLLM's
``vllm/model_executor/models/qwen3_next.py`` (gated-delta-net recurrent layers + full
attention): attention reads the paged KV cache through the request's block table; the
recurrent layers carry a fixed-size per-request state that is advanced token by token and
is all the model remembers of tokens it does not attend to.

What the "layers" compute (no learned weights, but nothing is a flag either):

- **KV slot** (``kv_tok``/``kv_pos`` in the block pool arrays): the token id and position
  the layer wrote. Attention only trusts a slot whose stored position is the one asked for.
- **Recurrent state** (``State``): where we are in the ChatML structure (outside a turn,
  reading a role, inside a turn of some role) and, inside an assistant turn, a *copy
  pointer* into the context plus how many lines remain. When the state enters an
  assistant turn, the instruction reader (an attention pass over the last user turn's
  slots) finds the count of lines asked for and where the document starts.
- **Output**: inside an assistant turn, the token under the copy pointer, or
  ``<|im_end|>`` once the requested lines are out. Inside a user/system turn (the model
  was never handed the assistant header) it continues the text like a bare induction
  head: the token that followed the most recent earlier occurrence of the current token.
  That rule loops on its own output, which is how a corrupted state degenerates into
  repetition. Outside any turn it ends the sequence.

The state update is the same for prefill and decode: if an input token disagrees with what
is under the copy pointer, the pointer re-anchors on the last earlier occurrence of that
token (the induction fallback). So a correct engine answers verbatim, and an engine that
writes the wrong tokens into slots or advances the state over the wrong inputs answers
wrongly -- for that reason alone.
"""
from __future__ import annotations

import bisect

import numpy as np

from .instruction import NO_LIMIT, parse_instruction  # noqa: F401 (re-exported)

ENDOFTEXT, IM_START, IM_END = 0, 1, 2
NUM_SPECIAL = 3
OUTSIDE, ROLE, TURN = 0, 1, 2
MAX_ROLE_TOKENS = 16  # a role name is a few tokens; longer header lines are not roles
# Votes the output head weighs beyond its decision: the most recent earlier occurrences of
# the input token (an older one weighs 2**-rank: below 2**-16 it cannot change a logprob
# printed to 4 decimals by more than 1e-4)
MAX_VOTES = 16


class State:
    """Per-request recurrent state (fixed size, like a GDN/Mamba state)."""

    __slots__ = ("mode", "role", "role_toks", "ptr", "end", "lines_left", "user_start", "user_len")

    def __init__(self) -> None:
        self.mode = OUTSIDE
        # where the last user turn's content began (-1: none seen): the recurrent memory the
        # instruction reader starts from, kept across turns. A state that never saw the
        # prompt (a block never written, a zero state) knows no user turn.
        self.user_start = -1
        # and how many of its tokens the state read (another count: a stretch skipped or
        # read twice, as in a state block cached before it was complete: mamba_chunks.py)
        self.user_len = 0
        self.role = ""
        self.role_toks: tuple[int, ...] = ()
        self.ptr = -1          # copy pointer (a context position), -1: none
        self.end = 0           # end of the copy source (exclusive)
        self.lines_left = 0

    def copy(self) -> "State":
        s = State.__new__(State)
        s.mode, s.role, s.role_toks = self.mode, self.role, self.role_toks
        s.ptr, s.end, s.lines_left = self.ptr, self.end, self.lines_left
        s.user_start, s.user_len = self.user_start, self.user_len
        return s

    @property
    def copying(self) -> bool:
        return self.mode == TURN and self.role == "assistant" and self.ptr >= 0

    def __repr__(self) -> str:  # debugging aid
        return (f"State(mode={self.mode}, role={self.role!r}, ptr={self.ptr}, end={self.end}, "
                f"lines_left={self.lines_left}, user={self.user_start}+{self.user_len})")


class SeqView:
    """One request's context as attention sees it: KV slots read through its block table."""

    __slots__ = ("kv_tok", "kv_pos", "bt", "bs", "_ctx", "_index", "written")

    def __init__(self, kv_tok: np.ndarray, kv_pos: np.ndarray, block_table: np.ndarray,
                 block_size: int, written: int = 0) -> None:
        self.kv_tok, self.kv_pos, self.bt, self.bs = kv_tok, kv_pos, block_table, block_size
        self._ctx: np.ndarray | None = None
        self._index: dict[int, np.ndarray] | None = None
        self.written = written  # positions [0, written) are written this step: gather once

    def tok(self, p: int) -> int:
        if p < 0 or p // self.bs >= len(self.bt):
            return -1
        slot = int(self.bt[p // self.bs]) * self.bs + p % self.bs
        return int(self.kv_tok[slot]) if self.kv_pos[slot] == p else -1

    def tokens(self, n: int) -> np.ndarray:
        """Tokens at positions [0, n); -1 where the slot does not hold that position."""
        if self._ctx is not None and len(self._ctx) >= n:
            return self._ctx[:n]
        n_req = n
        n = min(max(n, self.written), len(self.bt) * self.bs)
        nb = -(-n // self.bs)
        slots = (self.bt[:nb, None].astype(np.int64) * self.bs
                 + np.arange(self.bs)).ravel()[:n]
        t = self.kv_tok[slots]
        t = np.where(self.kv_pos[slots] == np.arange(n), t, -1)
        self._ctx = t
        self._index = None
        return t[:n_req]

    def invalidate(self) -> None:
        self._ctx = None
        self._index = None

    def last_occurrence(self, x: int, before: int) -> int:
        """Position of the last x at a position < before (-1: none): the induction lookup."""
        if before <= 0:
            return -1
        ctx = self.tokens(before)
        full = self._ctx
        if full is None or len(full) <= 8192:
            hits = np.flatnonzero(ctx == x)
            return int(hits[-1]) if len(hits) else -1
        # long contexts: a token -> sorted positions index, built once per step
        if self._index is None:
            order = np.argsort(full, kind="stable")
            uniq, first = np.unique(full[order], return_index=True)
            self._index = dict(zip(uniq.tolist(), np.split(order, first[1:])))
        group = self._index.get(x)
        if group is None:
            return -1
        k = bisect.bisect_left(group, before) - 1
        return int(group[k]) if k >= 0 else -1


class CopyModel:
    """The forward pass: state update, instruction reader and output rule."""

    def __init__(self, tokenizer, nl_id: int) -> None:
        self.tokenizer = tokenizer
        self.nl = nl_id
        self._role_cache: dict[tuple[int, ...], str] = {}

    # -- recurrent layer ------------------------------------------------------------------
    def _role_name(self, toks: tuple[int, ...]) -> str:
        name = self._role_cache.get(toks)
        if name is None:
            name = self.tokenizer.decode(list(toks), skip_special_tokens=False).strip()
            self._role_cache[toks] = name
        return name

    def step(self, s: State, view: SeqView, x: int, p: int) -> None:
        """Advance the state over input token x at position p."""
        if x == IM_START:
            s.mode, s.role, s.role_toks, s.ptr = ROLE, "", (), -1
            return
        if x == IM_END or x == ENDOFTEXT:
            s.mode, s.ptr = OUTSIDE, -1
            return
        if s.mode == ROLE:
            if x == self.nl:
                s.role = self._role_name(s.role_toks)
                s.mode = TURN
                if s.role == "user":
                    s.user_start, s.user_len = p + 1, 0
                elif s.role == "assistant":
                    self.read_instruction(s, view, p)
            elif len(s.role_toks) < MAX_ROLE_TOKENS:
                s.role_toks = s.role_toks + (x,)
            return
        if s.mode == TURN and s.role == "user":
            s.user_len += 1
        if s.copying:
            if s.ptr < s.end and view.tok(s.ptr) == x:
                s.ptr += 1
                if x == self.nl:
                    s.lines_left -= 1
            else:  # the input is not what the pointer holds: re-anchor (induction)
                q = view.last_occurrence(x, before=p)
                s.ptr = q + 1 if q >= 0 else s.end

    def advance(self, s: State, view: SeqView, start: int, toks: np.ndarray,
                boundaries: list[int]) -> dict[int, State]:
        """Advance over a prefill chunk at positions [start, start+len). Tokens that cannot
        change the state (text inside a non-copying turn, or outside turns) are skipped in
        bulk. Returns snapshots {b: state before position b} for each boundary b in
        (start, start+len]."""
        n = len(toks)
        specials = np.flatnonzero(toks < NUM_SPECIAL)
        snaps: dict[int, State] = {}
        bi = 0
        i = 0
        si = 0  # index into specials
        while True:
            # record boundaries reached so far (state before position start+i)
            while bi < len(boundaries) and boundaries[bi] <= start + i:
                if boundaries[bi] == start + i:
                    snaps[boundaries[bi]] = s.copy()
                bi += 1
            if i >= n:
                break
            if s.mode == ROLE and toks[i] != self.nl and toks[i] >= NUM_SPECIAL:
                i = self._role_text(s, toks, i, boundaries[bi] - start
                                    if bi < len(boundaries) else None)
                continue
            if s.copying:
                # a turn that ends inside this chunk, with no snapshot due before its end:
                # the pointer is dropped at <|im_end|>, so following it token by token
                # cannot change the state
                while si < len(specials) and specials[si] < i:
                    si += 1
                if si < len(specials) and (bi >= len(boundaries)
                                           or boundaries[bi] > start + int(specials[si])):
                    i = int(specials[si])
                    self.step(s, view, int(toks[i]), start + i)
                    i += 1
                    continue
            if s.mode == ROLE or s.copying:
                self.step(s, view, int(toks[i]), start + i)
                i += 1
                continue
            # skip to the next special token (state is constant until then), but stop at
            # boundaries so snapshots are taken
            while si < len(specials) and specials[si] < i:
                si += 1
            j = int(specials[si]) if si < len(specials) else n
            if bi < len(boundaries):
                j = min(j, max(boundaries[bi] - start, i))
            if j > i:
                if s.mode == TURN and s.role == "user":
                    s.user_len += j - i
                i = j
                continue
            self.step(s, view, int(toks[i]), start + i)
            i += 1
        return snaps

    def _role_text(self, s: State, toks: np.ndarray, i: int, due: int | None) -> int:
        """Role header text from ``i`` up to the newline (or ``due``, the next snapshot's
        offset): only its first tokens matter. Returns where the chunk goes on."""
        rest = toks[i:]
        stop = np.flatnonzero((rest == self.nl) | (rest < NUM_SPECIAL))
        j = i + (int(stop[0]) if len(stop) else len(rest))
        if due is not None:
            j = min(j, max(due, i + 1))
        room = MAX_ROLE_TOKENS - len(s.role_toks)
        if room > 0:
            s.role_toks = s.role_toks + tuple(int(t) for t in toks[i:min(j, i + room)])
        return j

    # -- the instruction reader (attention over the last user turn) ------------------------
    def read_instruction(self, s: State, view: SeqView, p: int) -> None:
        """Attend over the last user turn, from where the state remembers it began to its
        ``<|im_end|>``: a state that never saw it (``user_start`` -1), or read another length
        of it than the KV holds (``user_len``), finds no instruction and ends at once."""
        s.ptr, s.end, s.lines_left = 0, 0, 0
        cs = s.user_start
        if cs < 0 or cs > p:
            return
        ctx = view.tokens(p + 1)
        tail = ctx[cs:p + 1]
        read = np.flatnonzero((tail == IM_END) | (tail == IM_START) | (tail == ENDOFTEXT))
        if (int(read[0]) if len(read) else len(tail)) != s.user_len:
            return
        ends = np.flatnonzero((tail == IM_END) | (tail == IM_START))
        ce = cs + (int(ends[0]) if len(ends) else len(tail))
        self._plan_copy(s, ctx, cs, ce)

    def _plan_copy(self, s: State, ctx: np.ndarray, cs: int, ce: int) -> None:
        content = ctx[cs:ce]
        nl = np.flatnonzero(content == self.nl)
        line_starts = np.concatenate(([0], nl + 1))
        line_ends = np.concatenate((nl, [len(content)]))
        pieces = [[int(t) for t in content[a:b] if t >= 0] for a, b in zip(line_starts, line_ends)]
        lines = self.tokenizer.decode_batch(pieces, skip_special_tokens=False)
        first, end, count = parse_instruction(lines)
        if first >= end or count <= 0:
            s.ptr = s.end = cs
            return
        s.ptr = cs + int(line_starts[first])
        s.end = cs + int(line_ends[end - 1])
        s.lines_left = count

    # -- output head ------------------------------------------------------------------------
    def next_token(self, s: State, view: SeqView, x: int, p: int) -> int:
        """The token the model emits after input x at position p (state already includes x)."""
        if s.mode != TURN:
            return IM_END
        if s.role == "assistant":
            if s.ptr < 0 or s.ptr >= s.end:
                return IM_END
            t = view.tok(s.ptr)
            if t < 0 or t < NUM_SPECIAL or (t == self.nl and s.lines_left <= 1):
                return IM_END
            return t
        q = view.last_occurrence(x, before=p)
        if q < 0:
            return IM_END
        t = view.tok(q + 1)
        return t if t >= 0 else IM_END

    # -- the head's scores (what logprobs report) -----------------------------------------
    def votes(self, s: State, view: SeqView, x: int, p: int) -> list[tuple[int, float]]:
        """The candidates the output head weighed for the token after input x at position p,
        with their weights, strongest first; ``next_token`` is always the first.

        - The decision (``next_token``) has weight 1: in an assistant turn that is the copy
          head's pointer (or ``<|im_end|>`` where its line count or source ends), in a user
          or system turn the follower of the most recent earlier occurrence of x.
        - In an assistant turn the token under the pointer, where the stop rule overrode it,
          comes next (weight 1/2).
        - Then the induction votes: the followers of the earlier occurrences of x, most
          recent first, halving each time (the head's own lookup, ``last_occurrence``, is
          the first of them). A weight counts once per occurrence, so a token that followed
          x everywhere gathers them all.

        Each weight is below the sum of those before it, so the decision is the argmax
        whatever the others add up to. Outside a turn the head can only end: one candidate.
        """
        chosen = self.next_token(s, view, x, p)
        out = [(chosen, 1.0)]
        if s.mode != TURN:
            return out
        w = 0.5
        if s.role == "assistant" and s.ptr >= 0 and s.ptr < s.end:
            t = view.tok(s.ptr)
            if t >= NUM_SPECIAL and t != chosen:
                out.append((t, w))
                w /= 2
        ctx = view.tokens(p)
        for q in np.flatnonzero(ctx == x)[::-1][:MAX_VOTES]:
            t = view.tok(int(q) + 1)
            out.append((t if t >= 0 else IM_END, w))
            w /= 2
        return out


def logprobs_of(votes: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Votes summed per token and normalised: [(token, log p)], most likely first."""
    mass: dict[int, float] = {}
    for t, w in votes:
        mass[t] = mass.get(t, 0.0) + w
    total = sum(mass.values())
    return sorted(((t, float(np.log(m / total))) for t, m in mass.items()),
                  key=lambda tw: -tw[1])
