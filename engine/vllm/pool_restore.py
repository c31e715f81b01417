"""Restore a vLLM worker's KV pool by what its points wrote (issue 51), mixed into the worker
with ``engine.vllm.poison.PoisonWorker`` (its base).

The dirty set: at ``residue_lab_arm`` the worker's own ``execute_model`` is wrapped on the
instance (the extension class cannot define it: vLLM refuses an extension whose callables
clash with the worker's, ``worker_base.py``), and every scheduler output it runs adds the
block ids the scheduler gave: ``scheduled_new_reqs[i].block_ids`` and
``scheduled_cached_reqs.new_block_ids[i]`` (one list per KV cache group; the groups of a
hybrid share one block pool, so the union is kept and applied to every view, a superset).
The GDN/Mamba state slots of a request are block ids of its group too, so they are in the
set. Block 0 (the null block, which padding may name) is always added, and so are both ends of
``kv_cache_block_copies``: with ``--prefix-match-unit`` finer than the block, a request
whose prompt ends past its last full block registers a partial tail, and the next step
copies that block's page (every storage) into a fresh block that no block table names
(``MambaManager.allocate_new_blocks``). Missing it failed both audits of the first H200
run (``reports/h200/cost-restore/``: 16 of 16 storages, every point).

``residue_lab_restore_pool(pattern, how)``: ``whole`` fills every storage once
(``engine/vllm/pool_fill.py``); ``auto`` rewrites the dirty blocks and proves them, or runs
the whole fill where the dirty set cannot be known (this vLLM's scheduler output has
another shape, the tracking was not installed, a view has no block dim), and says which ran
and why. Every ``AUDIT_EVERY``-th dirty restore, and at ``residue_lab_audit`` (a run's
end), the whole pool is read back against the pattern: a write outside the tracked blocks
fails the audit (the record's ``audit.ok`` is false, the point is infra) and the whole fill
runs, so the next point starts clean. The builders' bookkeeping is copied back from the
boot copy as ``residue_lab_poison``'s ``builders`` region does, proven on the device.
"""
from __future__ import annotations

import functools
import time
from typing import Any, Iterable

from engine.poison_pattern import AUDIT_EVERY, RESTORE_HOWS as HOWS, seed_of
from engine.vllm import pool_fill

__all__ = ["PoolRestore", "AUDIT_EVERY", "HOWS", "dirty_ids"]

NULL_BLOCK = 0


# the scheduler output's fields that name blocks, all read below or known to write nothing
# (a count); a field of another release that names blocks makes the dirty set unknown
READ_BLOCK_FIELDS = frozenset({"scheduled_new_reqs", "scheduled_cached_reqs",
                               "new_block_ids_to_zero", "kv_cache_block_copies",
                               "partial_tail_offloads", "num_common_prefix_blocks"})


@functools.lru_cache(maxsize=8)
def _block_fields_of(cls: type) -> tuple[str, ...]:
    """A dataclass's fields that name blocks and are not read here (once per class, not
    per step)."""
    return _unread_names(cls.__dataclass_fields__)


def _unread_names(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(n for n in names if "block" in n and n not in READ_BLOCK_FIELDS))


def _unread_block_fields(scheduler_output: Any) -> list[str]:
    cls = type(scheduler_output)
    names = (_block_fields_of(cls) if hasattr(cls, "__dataclass_fields__")
             else _unread_names(vars(scheduler_output)))
    return [n for n in names if getattr(scheduler_output, n, None)]


def dirty_ids(scheduler_output: Any) -> set[int]:
    """The block ids one scheduler output gives its requests (every KV cache group) or
    has the worker write; AttributeError/TypeError where the output is not of the shape
    this reads, or names blocks in a field this does not read."""
    unread = _unread_block_fields(scheduler_output)
    if unread:
        raise TypeError(f"it names blocks in {', '.join(unread)}, which this does not read")
    out: set[int] = set()
    for req in scheduler_output.scheduled_new_reqs:
        for group in req.block_ids:
            out.update(int(b) for b in group)
    for groups in scheduler_output.scheduled_cached_reqs.new_block_ids:
        for group in groups or ():
            out.update(int(b) for b in group)
    for b in getattr(scheduler_output, "new_block_ids_to_zero", None) or ():
        out.add(int(b))
    for copy in getattr(scheduler_output, "kv_cache_block_copies", None) or ():
        # the worker copies a whole page, in every storage, into a block no request's
        # table names: the partial-tail CoW of mamba "align" mode (a running producer
        # stays on its source block; the cache entry moves to the copy). Both ends kept.
        out.update(int(b) for b in copy)
    for entries in (getattr(scheduler_output, "partial_tail_offloads", None) or {}).values():
        out.update(int(block) for _group, block, _tokens in entries)
    return out


class PoolRestore:
    """The pool-restore RPCs; expects ``_rl_runner``, ``_rl_layers`` and
    ``_rl_builders_boot`` from ``PoisonWorker``."""

    def _rl_pool(self) -> list:
        if getattr(self, "_rl_storages", None) is None:
            runner = self._rl_runner()   # type: ignore[attr-defined]
            tensors = [t for _, _, _, ts in self._rl_layers() for t in ts]  # type: ignore[attr-defined]
            num_blocks = getattr(getattr(runner, "kv_cache_config", None), "num_blocks", None)
            self._rl_storages = pool_fill.resolve(tensors, num_blocks)
            self._rl_tiles = pool_fill.TileCache()
        return self._rl_storages

    def _rl_track(self) -> None:
        """Wrap this worker's ``execute_model`` to collect the dirty set (once)."""
        self._rl_dirty: set[int] = set()
        self._rl_restores = 0
        self._rl_steps = 0      # steps seen since the last restore
        if getattr(self, "_rl_tracking", False):
            return
        run = getattr(self, "execute_model", None)
        if not callable(run):
            self._rl_dirty_why = "this worker has no execute_model to follow"
            return

        def execute_model(scheduler_output, *args, **kwargs):
            self._rl_steps += 1
            if self._rl_dirty_why is None:
                try:
                    self._rl_dirty |= dirty_ids(scheduler_output)
                except (AttributeError, TypeError) as e:
                    self._rl_dirty_why = f"scheduler output of another shape ({e})"
            return run(scheduler_output, *args, **kwargs)

        self.execute_model = execute_model
        self._rl_dirty_why: str | None = None
        self._rl_tracking = True

    def residue_lab_restore_pool(self, pattern: str = "A", how: str = "auto") -> dict:
        """Refill and prove the pool (dirty blocks or every storage) and the bookkeeping."""
        import torch
        if how not in HOWS:
            raise ValueError(f"how must be one of {', '.join(HOWS)}, not {how!r}")
        seed, t0 = seed_of(pattern), time.perf_counter()
        if torch.cuda.is_available():
            torch.cuda.synchronize()       # nothing in flight may race the writes
        with torch.inference_mode():
            storages = self._rl_pool()
            why, steps = self._rl_why_whole(storages, how), getattr(self, "_rl_steps", None)
            audit = None
            if why is None:
                pool = pool_fill.restore_blocks(storages, self._rl_dirty | {NULL_BLOCK}, seed,
                                                self._rl_tiles)
                self._rl_restores += 1
                if self._rl_restores % AUDIT_EVERY == 0:
                    audit = self._rl_audit(storages, seed)
            else:
                pool = pool_fill.fill_whole(storages, seed, self._rl_tiles)
            self._rl_dirty, self._rl_steps = set(), 0
            builders = self._rl_restore_builders()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        means = "dirty" if why is None else "storage-fill"
        restored = {"bytes": pool["bytes"], "blocks": pool.get("blocks", "all"),
                    "storages": len(storages), "steps_seen": steps}
        ok = bool(pool["ok"] and builders["ok"] and (audit is None or audit["ok"]))
        return {"pattern": pattern, "seed": seed, "means": means, "why": why, "ok": ok,
                "regions": {"pool": pool, "builders": builders}, "restored": restored,
                "audit": audit, "s": round(time.perf_counter() - t0, 6)}

    def _rl_why_whole(self, storages: list, how: str) -> str | None:
        if how == "whole":
            return "asked for the whole fill"
        if not getattr(self, "_rl_tracking", False):
            return "the dirty set is not tracked (residue_lab_arm was not called)"
        if self._rl_dirty_why is not None:
            return self._rl_dirty_why
        if not self._rl_steps:    # a point ran since the last restore, or the wrap is off the path
            return "no step was seen since the last restore"
        return pool_fill.restorable(storages)

    def _rl_audit(self, storages: list, seed: int) -> dict:
        """The whole pool read back; a miss is reported and repaired by the whole fill."""
        audit = pool_fill.prove(storages, seed, self._rl_tiles)
        if not audit["ok"]:
            audit["repaired_by"] = pool_fill.fill_whole(storages, seed, self._rl_tiles)
        return audit

    def residue_lab_audit(self, pattern: str = "A") -> dict:
        """The whole-pool proof alone (a run's end), repaired by the whole fill if it fails."""
        import torch
        with torch.inference_mode():
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            return self._rl_audit(self._rl_pool(), seed_of(pattern))

    def _rl_restore_builders(self) -> dict:
        import torch
        saved = getattr(self, "_rl_builders_boot", None)
        if saved is None:
            return {"ok": False, "error": "residue_lab_arm was not called at boot"}
        diffs = []
        for live, boot in saved:
            live.copy_(boot)
            diffs.append(torch.sum(live != boot))
        wrong = int(torch.stack(diffs).sum().item()) if diffs else 0
        return {"tensors": len(saved), "bytes": sum(b.numel() * b.element_size() for _, b in saved),
                "checksum": wrong, "expected": 0, "ok": wrong == 0}

    def residue_lab_copy_bandwidth(self, mib: int = 1024) -> dict:
        """The GPU's copy bandwidth, measured now (the fill's physical limit); the two
        buffers go back to the device afterwards, not to the allocator's cache."""
        import torch
        cuda = torch.cuda.is_available()
        out = pool_fill.copy_bandwidth("cuda" if cuda else "cpu", int(mib) << 20)
        if cuda:
            torch.cuda.empty_cache()
        return out
