"""Drafters: propose k tokens for the next verify step.

Mirrors vLLM's drafters: ``vllm/v1/spec_decode/eagle.py`` (MTP heads run off the target's
hidden state), the DFlash block drafter (one parallel block of k tokens conditioned on
target features), and ``vllm/v1/spec_decode/ngram_proposer.py`` (prompt lookup).

- ``mtp``: imitates the target: runs the target's output rule forward from a scratch copy
  of its state (that is what an MTP head is trained to do), so it also predicts the end of
  the answer. Deterministic imperfection: a draft at a position whose hash falls in the
  error band is perturbed (acceptance high, not always full: ~3.7 tok/step at k=3).
- ``dflash``: looks ahead in the copy source: the k tokens under the target's copy pointer,
  up to the next special token, without knowing where the answer stops. When the target
  state carries no copy pointer, the block is conditioned on nothing but the target's next
  token, and the drafter fills its block with it (its degenerate mode: ~2 tok/step).
- ``ngram``: the longest suffix n-gram (``prompt_lookup_max``..``min``) found earlier in the
  prompt + output; proposes what followed its most recent earlier occurrence. No match:
  no drafts (that request's step is not a uniform 1+k shape).
"""
from __future__ import annotations

import numpy as np

from .model import NUM_SPECIAL, CopyModel, SeqView, State

# Error bands (per mille) of the deterministic imperfection.
_ERR = {"mtp": 45, "dflash": 11}


def _bad(seed: int, pos: int, salt: int, per_mille: int) -> bool:
    h = (pos * 0x9E3779B1 + salt * 0x85EBCA77 + seed * 0xC2B2AE3D) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x2C1B3C6D) & 0xFFFFFFFF
    h ^= h >> 12
    return h % 1000 < per_mille


class Drafter:
    def __init__(self, method: str, k: int, model: CopyModel, seed: int, vocab_size: int,
                 lookup_max: int = 4, lookup_min: int = 1) -> None:
        self.method, self.k, self.model, self.seed = method, k, model, seed
        self.vocab_size = vocab_size
        self.lookup_max, self.lookup_min = lookup_max, lookup_min

    def _perturb(self, tok: int) -> int:
        t = (tok * 31 + 17) % self.vocab_size
        return t if t != tok and t >= NUM_SPECIAL else (tok + 5) % self.vocab_size or 5

    def propose(self, state: State, view: SeqView, bonus: int, pos: int,
                tokens: np.ndarray, limit: int) -> list[int]:
        """Drafts for positions pos+1.. given the committed state (before ``bonus``, the
        token just sampled for position ``pos``). ``limit``: most drafts allowed."""
        k = min(self.k, limit)
        if k <= 0:
            return []
        if self.method == "ngram":
            return self._ngram(tokens, k)
        s = state.copy()
        self.model.step(s, view, bonus, pos)
        if self.method == "mtp":
            out, x, p = [], bonus, pos
            for j in range(k):
                t = self.model.next_token(s, view, x, p)
                if _bad(self.seed, p + 1, 1, _ERR["mtp"]):
                    t = self._perturb(t)
                out.append(t)
                x, p = t, p + 1
                self.model.step(s, view, x, p)
            return out
        # dflash
        if s.copying:
            out = []
            for j in range(k):
                t = view.tok(s.ptr + j)
                if t < NUM_SPECIAL:  # end of the source span (or an unwritten slot)
                    break
                if _bad(self.seed, pos + 1 + j, 2, _ERR["dflash"]):
                    t = self._perturb(t)
                out.append(t)
            return out
        first = self.model.next_token(s, view, bonus, pos)
        return [] if first < NUM_SPECIAL else [first] * k

    def _ngram(self, arr: np.ndarray, k: int) -> list[int]:
        n_tok = len(arr)
        for n in range(min(self.lookup_max, n_tok - 1), self.lookup_min - 1, -1):
            suffix = arr[n_tok - n:]
            cand = np.flatnonzero(arr[:n_tok - n] == suffix[0])
            for i in range(1, n):
                cand = cand[arr[cand + i] == suffix[i]]
            if len(cand):
                c = int(cand[-1]) + n
                return [int(t) for t in arr[c:c + k]]
        return []
