"""Stale memory and its poisoning (issue 32): what a replayed verify plan reads that nothing
wrote for the request, and the fill that makes it the same on every server.

On real vLLM the bytes a broken cell's answer is made of are what the boot left in memory
nobody wrote for the request (graph capture's dummy runs, profiling, earlier requests):
the same from one server to the next on one machine and build, different between machines
and boots (docs/isolation.md). The lab models that by mechanism: at boot the state slots a
replayed verify plan reads (``BlockPool.slot_last`` / ``slot_drafts``, model_runner.py)
hold what a boot warm-up's decode left there: a turn header (``<|im_start|>``, an empty
role, a newline) and then *per-process* text tokens drawn with ``os.urandom``. A cold
request whose final chunk replays the verify plan (``--mamba-cache-mode align``, a chunk
budget) then continues inside that turn as an induction head from a token that differs
from one process to the next, so two lab fresh servers answer that cell differently;
a sleep level 1 discard gives a server its own boot contents back (vLLM's sleep restore
gave that server's first answer back, not another server's).

``residue_lab_poison`` fills the regions with a fixed pattern, the same integer hash on
every server (``PATTERNS``), as ``engine/vllm/poison.py`` does for a vLLM worker, and
returns the same proof shape: per region ``tensors``, ``bytes``, ``checksum`` (the sum of
the memory after the fill) and ``expected`` (the sum the pattern predicts), ``ok`` when
they agree. Regions:

- ``state``: the state slots, every row the same tile (whichever row a request gets, a
  stale read reads the same tokens);
- ``kv``: the KV slots' tokens with the pattern and their positions back to "never
  written" (-1): attention trusts a slot only at the position it was written for, so a
  correct engine never sees the pattern;
- ``builders``: the runner's persistent-row bookkeeping (which rows are free, in which
  order: it picks the row, hence the state slot, a request reads) back to the copy
  ``residue_lab_arm`` took at boot; bookkeeping is restored, never filled with a pattern.

``residue_lab_restore_pool`` (issue 51) models the restore by what a point wrote: the
runner's ``execute`` is followed from ``residue_lab_arm`` on (the rows its requests held and
the KV blocks their tokens were written to), and a restore refills only those rows and
blocks, proves them, and re-proves the whole pool every ``AUDIT_EVERY`` restores and at
``residue_lab_audit``, so a write outside the tracked set is caught; ``how="whole"`` (boot)
fills everything, as ``engine/vllm/pool_restore.py`` does for a vLLM worker.

Served as vLLM's dev-mode ``POST /collective_rpc`` (server.py), so the harness has one path.
"""
from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from ..poison_pattern import (AUDIT_EVERY, MODE_REGIONS, PATTERNS, RESTORE_HOWS, hash24,
                              parse_regions, seed_of)
from .model import IM_START, NUM_SPECIAL

__all__ = ["PATTERNS", "REGIONS", "StaleMemory", "pattern_tokens"]

REGIONS = MODE_REGIONS   # the lab has exactly the regions the mode fills
# the per-process boot contents are drawn from the tokens of common words, found in every
# document of the corpus, so an induction head reading one has something to continue
_BOOT_WORDS = (" the", " of", " and", " to", " in", " a", " was", " that", " with", " on",
               " for", " his", " at", " by", " from", " as", ",", ".", " it", " he")


def pattern_tokens(n: int, vocab_size: int, seed: int, salt: int) -> np.ndarray:
    """``n`` token ids from an integer hash of the index, seed and salt (never a special
    token): the same on every machine."""
    h = hash24(np.arange(n, dtype=np.int64), seed, salt)
    span = max(vocab_size - NUM_SPECIAL, 1)
    return (NUM_SPECIAL + h % span).astype(np.int32)


def _proof(arrays: list[np.ndarray], expected: int) -> dict[str, Any]:
    got = int(sum(int(a.astype(np.int64).sum()) for a in arrays))
    return {"tensors": len(arrays), "bytes": int(sum(a.nbytes for a in arrays)),
            "checksum": got, "expected": int(expected), "ok": got == expected}


class StaleMemory:
    """The pool's stale regions: per-process at boot, poisoned on request."""

    def __init__(self, pool, runner, tokenizer) -> None:
        self.pool, self.runner, self.vocab_size = pool, runner, tokenizer.vocab_size
        rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
        words = np.unique(np.concatenate([tokenizer.encode(w)[-1:] for w in _BOOT_WORDS]))
        rows, width = pool.slot_drafts.shape
        staged = rng.choice(words, size=(rows, 1 + width)).astype(np.int32)
        staged[:, 0], staged[:, 1:2] = IM_START, tokenizer.nl_id   # the warm-up's turn header
        pool.slot_last[:], pool.slot_drafts[:] = staged[:, 0], staged[:, 1:]
        # what a sleep discard gives back: this server's own boot contents
        pool.boot_slots = (pool.slot_last.copy(), pool.slot_drafts.copy())
        self._rows_boot: list[int] | None = None
        self._dirty_rows: set[int] = set()
        self._dirty_blocks: set[int] = set()
        self._restores = 0
        self._tracking = False

    # -- the RPC surface (engine/vllm/poison.py's names) --------------------------------
    def residue_lab_arm(self) -> dict[str, Any]:
        self._rows_boot = list(self.runner.free_rows)
        self._track()
        return {"builders": {"tensors": 1, "bytes": 8 * len(self._rows_boot)}}

    def residue_lab_describe(self) -> dict[str, Any]:
        p = self.pool
        return {"layers": [{"layer": "slots", "kind": "state",
                            "checksum": [int(p.slot_last.sum()), int(p.slot_drafts.sum())],
                            "head": p.slot_drafts[0].tolist()}],
                "builders": [{"free_rows": list(self.runner.free_rows)[:8]}]}

    def residue_lab_poison(self, regions: str = ",".join(REGIONS),
                           pattern: str = "A") -> dict[str, Any]:
        t0 = time.perf_counter()
        wanted = parse_regions(regions, REGIONS)
        seed = seed_of(pattern)
        proof = {r: getattr(self, f"_fill_{r}")(seed) for r in wanted}
        return {"pattern": pattern, "seed": seed, "regions": proof,
                "ok": all(p.get("ok", False) for p in proof.values()),
                "s": round(time.perf_counter() - t0, 5)}

    # -- the regions -------------------------------------------------------------------
    def _fill_state(self, seed: int) -> dict[str, Any]:
        p, v = self.pool, self.vocab_size
        last = pattern_tokens(1, v, seed, salt=0)
        drafts = pattern_tokens(p.slot_drafts.shape[1], v, seed, salt=1)
        p.slot_last[:] = last[0]            # in place: the runner holds views
        p.slot_drafts[:] = drafts
        rows = p.slot_last.shape[0]
        return _proof([p.slot_last, p.slot_drafts],
                      rows * (int(last.astype(np.int64).sum()) + int(drafts.astype(np.int64).sum())))

    def _fill_kv(self, seed: int) -> dict[str, Any]:
        p = self.pool
        tile = pattern_tokens(p.kv_tok.shape[0], self.vocab_size, seed, salt=2)
        p.kv_tok[:] = tile
        p.kv_pos.fill(-1)
        return _proof([p.kv_tok, p.kv_pos], int(tile.astype(np.int64).sum()) - p.kv_pos.shape[0])

    def _fill_builders(self, seed: int) -> dict[str, Any]:
        if self._rows_boot is None:
            return {"ok": False, "error": "residue_lab_arm was not called at boot"}
        if self.runner.rows:
            return {"ok": False, "error": f"{len(self.runner.rows)} row(s) in use: a request "
                                          "is running"}
        self.runner.free_rows[:] = self._rows_boot
        # weighted by place: the order is what picks a row, so the sum must see it
        weights = np.arange(1, len(self._rows_boot) + 1, dtype=np.int64)
        now = np.asarray(self.runner.free_rows, dtype=np.int64) * weights
        return _proof([now], int((np.asarray(self._rows_boot, dtype=np.int64) * weights).sum()))

    # -- the restore by what a point wrote (issue 51) -----------------------------------
    def _track(self) -> None:
        """Follow the runner's ``execute``: the blocks each item's tokens go to, the row it
        runs in (wrapped on the instance once, as the vLLM worker's ``execute_model`` is)."""
        run, runner = getattr(self.runner, "execute", None), self.runner
        if self._tracking or not callable(run):     # a runner without execute: not tracked
            return

        def execute(items):
            bs = self.pool.block_size
            for req, n, _ in items:
                start = req.num_computed_tokens
                pos = np.arange(start, start + n)
                self._dirty_blocks.update(int(b) for b in np.unique(req.block_table[pos // bs]))
            out = run(items)
            self._dirty_rows.update(runner.rows[req.request_id] for req, _, _ in items
                                    if req.request_id in runner.rows)
            return out

        runner.execute = execute
        self._tracking = True

    def residue_lab_restore_pool(self, pattern: str = "A", how: str = "auto") -> dict[str, Any]:
        if how not in RESTORE_HOWS:
            raise ValueError(f"how must be one of {', '.join(RESTORE_HOWS)}, not {how!r}")
        t0, seed = time.perf_counter(), seed_of(pattern)
        why = "asked for the whole fill" if how == "whole" else (
            None if self._tracking else "the dirty set is not tracked (residue_lab_arm was not called)")
        audit = None
        if why is None:
            pool = self._refill_dirty(seed)
            self._restores += 1
            if self._restores % AUDIT_EVERY == 0:
                audit = self.residue_lab_audit(pattern)
        else:
            parts = [self._fill_state(seed), self._fill_kv(seed)]
            pool = {k: sum(p[k] for p in parts) for k in ("bytes", "checksum", "expected")}
            pool["ok"] = all(p["ok"] for p in parts)
        blocks = sorted(self._dirty_blocks) if why is None else "all"
        self._dirty_rows, self._dirty_blocks = set(), set()
        builders = self._fill_builders(seed)
        return {"pattern": pattern, "seed": seed, "means": "dirty" if why is None else "storage-fill",
                "why": why, "ok": bool(pool["ok"] and builders["ok"] and (audit or {"ok": True})["ok"]),
                "regions": {"pool": pool, "builders": builders}, "audit": audit,
                "restored": {"bytes": pool["bytes"],
                             "blocks": "all" if why else len(blocks),
                             "rows": "all" if why else len(pool["rows"])},
                "s": round(time.perf_counter() - t0, 5)}

    def _refill_dirty(self, seed: int) -> dict[str, Any]:
        """The tracked rows' state slots and blocks' KV slots back to the fill's values."""
        p, v, bs = self.pool, self.vocab_size, self.pool.block_size
        rows = np.asarray(sorted(self._dirty_rows), dtype=np.int64)
        slots = (np.asarray(sorted(self._dirty_blocks), dtype=np.int64)[:, None] * bs
                 + np.arange(bs)).ravel()
        last = pattern_tokens(1, v, seed, salt=0)
        drafts = pattern_tokens(p.slot_drafts.shape[1], v, seed, salt=1)
        tile = pattern_tokens(p.kv_tok.shape[0], v, seed, salt=2)
        p.slot_last[rows], p.slot_drafts[rows] = last[0], drafts
        p.kv_tok[slots], p.kv_pos[slots] = tile[slots], -1
        want = (len(rows) * (int(last[0]) + int(drafts.astype(np.int64).sum()))
                + int(tile[slots].astype(np.int64).sum()) - len(slots))
        out = _proof([p.slot_last[rows], p.slot_drafts[rows], p.kv_tok[slots], p.kv_pos[slots]], want)
        out["rows"] = rows.tolist()
        return out

    def residue_lab_copy_bandwidth(self, mib: int = 64) -> dict[str, Any]:
        """The host's copy bandwidth (the lab's pool is host memory), read + write counted,
        as the vLLM worker reports its GPU's."""
        src = np.ones(int(mib) << 20, dtype=np.uint8)
        dst = np.empty_like(src)
        np.copyto(dst, src)
        t0 = time.perf_counter()
        np.copyto(dst, src)
        secs = time.perf_counter() - t0
        return {"bytes": src.nbytes, "repeats": 1, "s": round(secs, 6), "device": "host",
                "bytes_per_s": 2 * src.nbytes / secs if secs > 0 else None,
                "timer": "perf_counter"}

    def residue_lab_audit(self, pattern: str = "A") -> dict[str, Any]:
        """Every state slot and KV slot against the pattern, nothing written; a miss is
        repaired by the whole fill so the next point starts clean."""
        p, v, seed = self.pool, self.vocab_size, seed_of(pattern)
        last = pattern_tokens(1, v, seed, salt=0)
        drafts = pattern_tokens(p.slot_drafts.shape[1], v, seed, salt=1)
        tile = pattern_tokens(p.kv_tok.shape[0], v, seed, salt=2)
        wrong = int((p.slot_last != last[0]).sum() + (p.slot_drafts != drafts).sum()
                    + (p.kv_tok != tile).sum() + (p.kv_pos != -1).sum())
        out = {"bytes": int(p.nbytes), "checksum": wrong, "expected": 0, "ok": wrong == 0}
        if wrong:
            out["repaired_by"] = [self._fill_state(seed), self._fill_kv(seed)]
        return out
