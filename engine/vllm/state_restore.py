"""A vLLM worker extension that returns one kind of a worker's mutable state at a time to
what it held just after boot, so an experiment can find which state makes a reused server
answer differently from a fresh one (issue 24, "Find the state").

Loaded with ``--worker-extension-cls engine.vllm.state_restore.StateRestore``; vLLM mixes
the class into its GPU worker (``vllm/v1/worker/worker_base.py``, ``worker_extension_cls``)
and the dev-mode route ``POST /collective_rpc`` (``VLLM_SERVER_DEV_MODE=1``,
``vllm/entrypoints/serve/dev/rpc/api_router.py``) calls its methods by name with string
arguments. Nothing here patches vLLM: it only reads the model runner's attributes.

Kinds of state (``GPUModelRunner`` in ``vllm/v1/worker/gpu_model_runner.py``):
- ``kv0``: the KV pool (``runner.kv_caches``), zeroed. On a hybrid the GDN/Mamba state
  slots are views into this pool too, so this kind covers the recurrent state. This is
  what sleep level 1 discards (its ``kv_cache`` memory tag wraps ``initialize_kv_cache``).
- ``kvsnap``: the KV pool copied back from the snapshot taken just after boot (exact,
  at the cost of a second pool: for the tiny models only).
- ``runner``: the runner's persistent input buffers (``CpuGpuBuffer`` and tensors held as
  its attributes: input ids, positions, query_start_loc, seq_lens, ...): the CUDA-graph
  inputs whose padded tail a replay reads.
- ``batch``: the persistent batch (``runner.input_batch``: token ids, block tables).
- ``attn``: the attention metadata builders' persistent buffers (``runner.attn_groups``).
- ``drafter``: the speculative proposer's tensors (``runner.drafter``).
Zeroing kinds (what sleep level 1 discards: everything ``initialize_kv_cache`` allocates
under the ``kv_cache`` memory tag, re-mapped as new memory on wake):
- ``kvstore0``: the KV pool's whole storages (views leave padding bytes out);
- ``mamba0``: the runner's mamba buffers (``runner._mamba_bufs``);
- ``builders0``: the attention metadata builders' tensors (``attn_groups`` → groups →
  ``metadata_builders``), the persistent inputs of a FULL graph replay;
- ``blocktable0``: the persistent batch's block tables (``input_batch.block_table``).
The snapshot kinds (``kvsnap``, ``runner``, ``batch``, ``attn``, ``drafter``) write a
boot-time copy back over live bookkeeping and, on the H200, left the server answering
wrong on every prompt: they are kept only to reproduce that finding.
"""
from __future__ import annotations

import time
from typing import Any, Iterator

__all__ = ["StateRestore", "KINDS"]

KINDS = ("kv0", "kvstore0", "mamba0", "builders0", "blocktable0", "kvsnap", "runner", "batch",
         "attn", "drafter")
_ROOTS = {"runner": None, "batch": "input_batch", "attn": "attn_groups", "drafter": "drafter"}
_MAX_DEPTH = 4


def _tensors(obj: Any, depth: int, seen: set[int]) -> Iterator[Any]:
    """Every mutable tensor reachable from ``obj`` through attributes, lists and dicts,
    never into a ``torch.nn.Module`` (weights are not state a request leaves behind)."""
    import torch
    if id(obj) in seen or depth < 0:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.nn.Parameter) or isinstance(obj, torch.nn.Module):
        return
    if isinstance(obj, torch.Tensor):
        yield obj
        return
    if isinstance(obj, (list, tuple)):
        items: Any = obj
    elif isinstance(obj, dict):
        items = obj.values()
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = vars(obj).values()
    else:
        return
    for item in items:
        yield from _tensors(item, depth - 1, seen)


def _storages(runner) -> list:
    """The KV tensors' whole storages, as flat byte tensors (each storage once)."""
    import torch
    out, seen = [], set()
    for t in _tensors(runner.kv_caches, _MAX_DEPTH, set()):
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            out.append(torch.empty(0, dtype=torch.uint8, device=t.device).set_(st))
    return out


def _deep(root: Any) -> list:
    return list(_tensors(root, 7, set()))


_ZEROING = {
    "kvstore0": _storages,
    "mamba0": lambda r: _deep(getattr(r, "_mamba_bufs", None)),
    "builders0": lambda r: _deep([getattr(g, "metadata_builders", None)
                                  for gs in getattr(r, "attn_groups", []) for g in gs]),
    "blocktable0": lambda r: _deep(getattr(getattr(r, "input_batch", None), "block_table",
                                           None)),
}


class StateRestore:
    """Mixed into vLLM's worker: ``residue_lab_snapshot`` once after boot, then
    ``residue_lab_restore("kv0,runner")`` between requests."""

    def _rl_runner(self):
        return self.model_runner   # type: ignore[attr-defined]

    def _rl_kv(self) -> list:
        seen: set[int] = set()
        return list(_tensors(self._rl_runner().kv_caches, _MAX_DEPTH, seen))

    def _rl_kind_tensors(self, kind: str) -> list:
        runner = self._rl_runner()
        kv_ids = {id(t) for t in self._rl_kv()}
        seen = set(kv_ids) | {id(runner.model)}
        if kind == "runner":
            roots = [v for k, v in vars(runner).items()
                     if k not in ("input_batch", "attn_groups", "drafter", "kv_caches")]
            depth = 2
        else:
            roots = [getattr(runner, _ROOTS[kind], None)]
            depth = _MAX_DEPTH
        out = []
        for root in roots:
            out.extend(t for t in _tensors(root, depth, seen) if id(t) not in kv_ids)
        return out

    def residue_lab_snapshot(self) -> dict:
        """Copy every kind's tensors as they are now (call before the first request)."""
        t0 = time.perf_counter()
        self._rl_saved = {kind: [(t, t.detach().clone()) for t in self._rl_kind_tensors(kind)]
                          for kind in ("runner", "batch", "attn", "drafter")}
        self._rl_saved["kvsnap"] = [(t, t.detach().clone()) for t in self._rl_kv()]
        return {k: {"tensors": len(v), "bytes": sum(c.numel() * c.element_size() for _, c in v)}
                for k, v in self._rl_saved.items()} | {"s": round(time.perf_counter() - t0, 4)}

    def residue_lab_restore(self, kinds: str) -> dict:
        """Return the named kinds (comma-separated) to their state at the snapshot."""
        import torch
        t0 = time.perf_counter()
        done: dict[str, int] = {}
        for kind in [k for k in kinds.split(",") if k]:
            if kind not in KINDS:
                raise ValueError(f"unknown state kind {kind!r}; kinds: {', '.join(KINDS)}")
            if kind in _ZEROING:
                tensors = _ZEROING[kind](self._rl_runner())
                # vLLM allocates these under inference mode: an in-place write outside it
                # is refused ("Inplace update to inference tensor"), as round 2 hit
                with torch.inference_mode():
                    for t in tensors:
                        t.zero_()
                done[kind] = len(tensors)
                continue
            if kind == "kv0":
                kv = self._rl_kv()
                for t in kv:
                    t.zero_()
                done[kind] = len(kv)
                continue
            pairs = self._rl_saved[kind]
            for live, saved in pairs:
                live.copy_(saved)
            done[kind] = len(pairs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return {"restored": done, "s": round(time.perf_counter() - t0, 4)}
