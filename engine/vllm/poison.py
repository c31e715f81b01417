"""Poisoning the state a replayed CUDA graph can read without anyone writing it (issue 32).

Bug B is a read of stale state: a prefill chunk of ``1 + k`` tokens replays the captured
spec-verify graph, and that graph reads the GDN/Mamba builder's persistent index buffers
(``GDNAttentionMetadataBuilder.spec_state_indices_tensor``, ``num_accepted_tokens``, ...,
``vllm/v1/attention/backends/gdn_attn.py``) which the builder did not write for a
prefill, and through them recurrent state slots of the KV pool that belong to no live
request. What those slots hold is whatever the boot (graph capture's dummy runs, kernel
autotuning) or earlier requests left there, so the broken answer differs between servers
and machines. Memory sanitizers make such reads deterministic by filling the memory with a
fixed pattern; this module does that for a vLLM worker:

- ``state``: every Mamba/GDN layer's state tensors (conv and SSM), every block. A correct
  engine never reads a state slot it did not write for the request (a prefill without
  history ignores its initial state: ``has_initial_state``), so the fill is invisible to it.
- ``kv``: every attention layer's KV tensor, every block (masked positions are read but
  multiplied by zero probability: the pattern is finite, so NaN x 0 cannot happen).
- ``null``: only block 0 (``NULL_BLOCK_ID``, the padding block) of each state tensor.
- ``bytes`` / ``store0`` / ``state0`` / ``kv0``: whole storages as bytes (padding bytes
  included) or zeros; kept for the region hunt (``benchmarks/gpu_poison.py``) only.
- ``builders``: the metadata builders' persistent tensors (indices, masks, offsets) are
  bookkeeping, not state: they are never filled with a pattern (an index that vLLM does not
  use as padding would send a replay into memory nobody owns). They are copied at
  ``residue_lab_arm`` (boot, before the first request) and written back by this region.

Every fill returns a proof per region: tensors, bytes written, and an exact integer
checksum of the memory after the fill next to the checksum the pattern predicts; the two
are equal only if every byte of the region holds the pattern. The pattern is computed with
integer arithmetic from a seed and the layer's index, so it is the same on every machine.

Loaded as ``--worker-extension-cls engine.vllm.poison.PoisonWorker`` (vLLM mixes it into
its GPU worker: ``worker_extension_cls`` in ``vllm/v1/worker/worker_base.py``) and called
through the dev-mode ``POST /collective_rpc`` (``VLLM_SERVER_DEV_MODE=1``), as
``engine.vllm.state_restore`` is. Nothing here patches vLLM.
"""
from __future__ import annotations

import time
from typing import Any

from engine.poison_pattern import MODE_REGIONS, PATTERNS, hash24, seed_of
from engine.poison_pattern import parse_regions as _parse_regions
from engine.vllm.pool_restore import PoolRestore
from engine.vllm.state_restore import StateRestore, _tensors

__all__ = ["PoisonWorker", "REGIONS", "PATTERNS", "pattern_tile", "fill", "parse_regions"]

REGIONS = ("state", "kv", "null", "builders", "bytes", "store0", "state0", "kv0", "free")
DEFAULT_REGIONS = MODE_REGIONS   # what --poison fills (engine/poison_pattern.py)
_TILE_MAX = 1 << 22          # elements of one tile; larger tensors repeat it
_SUM_SLAB = 1 << 25          # elements per int64 reduction (256 MiB of temporaries)
_AMPLITUDE = 1.0             # values in [-1, 1): finite in every float dtype, never NaN/inf


def parse_regions(spec: str) -> tuple[str, ...]:
    return _parse_regions(spec, REGIONS)


def pattern_tile(shape, dtype, seed: int, salt: int, device=None):
    """A tile of ``shape`` in ``dtype`` whose values come from integer hashing only
    (Knuth's multiplicative hash of the element index, seed and salt), scaled to [-1, 1):
    the same bytes on every machine and GPU."""
    import torch
    n = 1
    for d in shape:
        n *= int(d)
    h = hash24(torch.arange(n, dtype=torch.int64, device=device), seed, salt)
    vals = (h.to(torch.float32) / float(1 << 23) - 1.0) * _AMPLITUDE
    return vals.to(dtype).reshape(tuple(shape))


def _int_view(t):
    import torch
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def checksum(t) -> int:
    """Exact integer sum of the tensor's bytes taken as integers of its element size
    (order-independent, so equal on every GPU). Reduced in slabs of dim 0 of at most
    ``_SUM_SLAB`` elements: the int64 reduction of a whole pool would take GBs beside it
    (9.8 GiB on the H200), and one slice at a time is thousands of syncs."""
    import torch
    v = _int_view(t)
    if v.dim() == 0 or v.numel() <= _SUM_SLAB:
        return int(torch.sum(v, dtype=torch.int64).item())
    per = max(v[0].numel(), 1)
    if per > _SUM_SLAB:
        return sum(checksum(v[i]) for i in range(v.shape[0]))
    step = max(_SUM_SLAB // per, 1)
    parts = [torch.sum(v[i:i + step], dtype=torch.int64) for i in range(0, v.shape[0], step)]
    return int(torch.stack(parts).sum().item())


def _tile_dims(shape) -> int:
    """The first dimension from which the trailing dims fit in one tile."""
    k, n = len(shape), 1
    while k > 0 and n * int(shape[k - 1]) <= _TILE_MAX:
        k -= 1
        n *= int(shape[k])
    return k


def fill(t, seed: int, salt: int, per_block: bool = False) -> dict:
    """Fill ``t`` in place (a view is written through its strides: CUDA graphs keep the
    address) with the pattern, and prove it: the checksum after the fill against the one
    the tile predicts. ``per_block``: every index of dim 0 (a state tensor's block) gets
    the same tile, so a stale index reads the same bytes whichever free block it names."""
    k = _tile_dims(t.shape)
    if per_block:
        k = max(k, 1)
    tile = pattern_tile(t.shape[k:], t.dtype, seed, salt, device=t.device)
    t.copy_(tile.expand(t.shape))
    repeats = t.numel() // max(tile.numel(), 1)
    expected = checksum(tile) * repeats
    got = checksum(t)
    return {"bytes": t.numel() * t.element_size(), "checksum": got, "expected": expected,
            "ok": got == expected, "dtype": str(t.dtype).replace("torch.", "")}


def _merge(acc: dict, one: dict) -> None:
    acc["tensors"] = acc.get("tensors", 0) + 1
    acc["bytes"] = acc.get("bytes", 0) + one["bytes"]
    acc["checksum"] = acc.get("checksum", 0) + one["checksum"]
    acc["expected"] = acc.get("expected", 0) + one["expected"]
    acc["ok"] = acc.get("ok", True) and one["ok"]


class PoisonWorker(PoolRestore, StateRestore):
    """Mixed into vLLM's GPU worker: ``residue_lab_arm`` once after boot, then
    ``residue_lab_poison("state,kv,builders", "A")`` at boot and at every restore (the
    per-view fill), or ``residue_lab_restore_pool`` (each storage once, or the blocks the
    points were given: engine/vllm/pool_restore.py)."""

    # -- where the regions are -------------------------------------------------------
    def _rl_layers(self) -> list[tuple[int, str, str, list]]:
        """(index, layer name, "state" | "kv", tensors) for every layer with a KV cache,
        from the runner's KV cache config (which group spec each layer has) and the
        forward context (which tensors vLLM bound to it: ``bind_kv_cache``)."""
        runner = self._rl_runner()
        ctx = runner.compilation_config.static_forward_context
        out = []
        for group in runner.kv_cache_config.kv_cache_groups:
            kind = "state" if type(group.kv_cache_spec).__name__.startswith("Mamba") else "kv"
            for name in group.layer_names:
                kv = getattr(ctx[name], "kv_cache", None)
                tensors = list(_tensors(kv, 3, set()))
                out.append((len(out), name, kind, tensors))
        return out

    def _rl_builder_tensors(self) -> list:
        runner = self._rl_runner()
        kv_ptrs = {t.untyped_storage().data_ptr() for _, _, _, ts in self._rl_layers() for t in ts}
        roots = [getattr(g, "metadata_builders", None)
                 for gs in getattr(runner, "attn_groups", []) for g in gs]
        return [t for t in _tensors(roots, 4, set())
                if t.untyped_storage().data_ptr() not in kv_ptrs]

    # -- the RPC surface ---------------------------------------------------------------
    def residue_lab_arm(self) -> dict:
        """Copy the builders' bookkeeping as the boot left it and start following the blocks
        the scheduler gives (call before any request)."""
        self._rl_track()
        self._rl_builders_boot = [(t, t.detach().clone()) for t in self._rl_builder_tensors()]
        return {"builders": {"tensors": len(self._rl_builders_boot),
                             "bytes": sum(c.numel() * c.element_size()
                                          for _, c in self._rl_builders_boot)}}

    def residue_lab_describe(self) -> dict:
        """Checksums of every region as it is now, and the first entries of the builders'
        small integer buffers: what differs between two servers before any fill."""
        import torch
        out: dict[str, Any] = {"layers": []}
        for i, name, kind, ts in self._rl_layers():
            row = {"layer": name, "kind": kind, "checksum": [checksum(t) for t in ts]}
            if kind == "state":
                row["null"] = [checksum(t[0]) for t in ts]
            out["layers"].append(row)
        small = []
        for t in self._rl_builder_tensors():
            if t.dtype in (torch.int32, torch.int64, torch.bool) and t.numel():
                small.append({"shape": list(t.shape), "dtype": str(t.dtype),
                              "head": t.flatten()[:8].tolist(), "checksum": checksum(t)})
        out["builders"] = small
        return out

    def residue_lab_poison(self, regions: str = ",".join(DEFAULT_REGIONS),
                           pattern: str = "A") -> dict:
        """Fill the named regions (comma-separated, ``REGIONS``) and prove each fill."""
        import torch
        seed = seed_of(pattern)
        wanted = parse_regions(regions)
        t0 = time.perf_counter()
        if torch.cuda.is_available():
            torch.cuda.synchronize()       # nothing in flight may race the writes
        proof: dict[str, dict] = {}
        with torch.inference_mode():       # vLLM allocated these under inference mode
            layers = self._rl_layers()
            for region in wanted:
                proof[region] = self._rl_fill_region(region, layers, seed)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        return {"pattern": pattern, "seed": seed, "regions": proof,
                "ok": all(p.get("ok", False) for p in proof.values()),
                "s": round(time.perf_counter() - t0, 5)}

    def _rl_fill_region(self, region: str, layers, seed: int) -> dict:
        acc: dict = {}
        if region == "builders":
            saved = getattr(self, "_rl_builders_boot", None)
            if saved is None:
                return {"ok": False, "error": "residue_lab_arm was not called at boot"}
            for live, boot in saved:
                live.copy_(boot)
                _merge(acc, {"bytes": boot.numel() * boot.element_size(),
                             "checksum": checksum(live), "expected": checksum(boot), "ok": True})
            acc.setdefault("ok", True)
            return acc
        if region == "free":
            return _fill_free()
        if region in ("bytes", "store0"):
            import torch
            seen = set()
            for i, _, _, ts in layers:
                for t in ts:
                    st = t.untyped_storage()
                    if st.data_ptr() in seen:
                        continue
                    seen.add(st.data_ptr())
                    flat = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st)
                    if region == "store0":
                        flat.zero_()
                        _merge(acc, {"bytes": flat.numel(), "checksum": checksum(flat),
                                     "expected": 0, "ok": checksum(flat) == 0})
                    else:
                        _merge(acc, _fill_bytes(flat))
            return acc or {"ok": False, "error": "no KV storage found"}
        kind = {"state": "state", "null": "state", "state0": "state", "kv": "kv", "kv0": "kv"}[region]
        for i, _, k, ts in layers:
            if k != kind:
                continue
            for j, t in enumerate(ts):
                target = t[0] if region == "null" else t
                if region.endswith("0"):
                    target.zero_()
                    c = checksum(target)
                    _merge(acc, {"bytes": target.numel() * target.element_size(),
                                 "checksum": c, "expected": 0, "ok": c == 0})
                else:
                    _merge(acc, fill(target, seed, salt=i * 8 + j, per_block=kind == "state" and region != "null"))
        return acc or {"ok": False, "error": f"no {kind} tensors on this worker"}


def _fill_bytes(flat) -> dict:
    """Whole storages as bytes: 0x3C, 0xBC alternating (finite as bf16, fp16 and fp32)."""
    import torch
    n = flat.numel()
    tile = torch.tensor([0x3C, 0xBC], dtype=torch.uint8, device=flat.device)
    flat[: n - n % 2].view(-1, 2).copy_(tile.expand(n // 2, 2))
    if n % 2:
        flat[-1] = 0x3C
    expected = (0x3C + 0xBC) * (n // 2) + (0x3C if n % 2 else 0)
    got = checksum(flat)
    return {"bytes": n, "checksum": got, "expected": expected, "ok": got == expected}


def _fill_free(chunk: int = 1 << 28) -> dict:
    """The caching allocator's free memory (reserved, not allocated) as bytes of the
    pattern: what a later ``torch.empty`` outside a CUDA graph hands out. Takes chunks only
    while the pool's reservation does not grow (no new device memory), then frees them, so
    they stay cached and poisoned. For the region hunt: an index read from it is garbage."""
    import torch
    if not torch.cuda.is_available():
        return {"ok": False, "error": "no CUDA device"}
    held, acc = [], {}
    reserved = torch.cuda.memory_reserved()
    size = chunk
    while size >= 1 << 20:
        try:
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
        except torch.cuda.OutOfMemoryError:
            size //= 2
            continue
        if torch.cuda.memory_reserved() > reserved:      # it came from the device: stop growing
            del t
            reserved = torch.cuda.memory_reserved()   # (that block stays cached, unpoisoned)
            size //= 2
            continue
        held.append(t)
        _merge(acc, _fill_bytes(t))
    del held
    acc.setdefault("ok", True)
    acc["reserved"] = reserved
    return acc
