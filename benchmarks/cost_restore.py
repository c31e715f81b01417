"""The restore kinds of issue 51 in the cost curve (``benchmarks/gpu_cost_curve.py``): beside
the old per-view state fill (``fill``), on the same servers and in the same rounds,

- ``bandwidth``: the GPU's device-to-device copy bandwidth, measured by the worker once per
  server (``residue_lab_copy_bandwidth``: CUDA events, read + write counted);
- ``storage_fill``: every KV storage written once and proven (``residue_lab_restore_pool``
  ``how=whole``), at boot and in every round after the old fill;
- ``dirty_restore``: right after a point, the blocks that point was given (``how=auto``):
  the record says which ran (``dirty`` or the whole fill, and why) and the audit every
  ``AUDIT_EVERY`` restores;
- ``audit``: the whole pool re-proven at the server's last round (``residue_lab_audit``).

A mixin of ``Run``: it uses ``self.rpc``, ``self.record``, ``self.took`` and ``self.fits``.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

__all__ = ["PoolKinds", "POOL_FILE", "POOL_METHOD", "pool_in_tree", "KIND_GUESS_S"]

POOL_FILE = Path(__file__).resolve().parent.parent / "engine" / "vllm" / "pool_restore.py"
POOL_METHOD = "residue_lab_restore_pool"
# before one was measured: what an action of each kind may take (the deadline's guess)
KIND_GUESS_S = {"bandwidth": 30.0, "storage_fill": 20.0, "dirty_restore": 20.0,
                "audit": 20.0, "arm": 20.0}
BANDWIDTH_MIB = 1024


def pool_in_tree() -> bool:
    """``engine/vllm/pool_restore.py`` with the method this script calls."""
    try:
        return f"def {POOL_METHOD}" in POOL_FILE.read_text()
    except OSError:
        return False


class PoolKinds:
    async def pool_rpc(self, name: str, client, kind: str, method: str, args: list,
                       rnd: int = 0, reset: bool = False) -> dict | None:
        """One RPC of the worker, timed and recorded (``s`` the call, ``result.s`` the
        worker's own seconds, so the HTTP's share is ``s`` less it); ``reset``: the prefix
        cache reset sent at the same time (the engine runs the two one after the other,
        in either order, with no request between: neither needs the other), each timed."""
        t = time.monotonic()

        async def timed(coro) -> float:
            t0 = time.monotonic()
            await coro
            return time.monotonic() - t0

        async def call() -> None:
            resp = await self.rpc.post(f"{client.base_url}/collective_rpc",
                                       json={"method": method, "args": args})
            resp.raise_for_status()
            got.append((resp.json().get("results") or [None])[0])

        got: list = []
        try:
            if reset:
                reset_s, rpc_s = await asyncio.gather(timed(client.reset_prefix_cache()),
                                                      timed(call()))
            else:
                reset_s, rpc_s = 0.0, await timed(call())
        except Exception as exc:      # recorded; the run goes on
            self.record(kind, name, round=rnd, error=f"{type(exc).__name__}: {exc}")
            return None
        result = got[0]
        s = round(time.monotonic() - t, 4)
        self.took(name, kind, s)
        self.record(kind, name, round=rnd, s=s, reset_s=round(reset_s, 4),
                    rpc_s=round(rpc_s, 4), reset_overlapped=reset,
                    proven=(result or {}).get("ok") if isinstance(result, dict) else None,
                    result=result)
        return result

    async def pool_boot(self, name: str, client) -> None:
        """Arm (the dirty set followed from here), the bandwidth, the boot's whole fill."""
        for kind, method, args in (("arm", "residue_lab_arm", []),
                                   ("bandwidth", "residue_lab_copy_bandwidth", [BANDWIDTH_MIB]),
                                   ("storage_fill", POOL_METHOD, ["A", "whole"])):
            if self.fits(name, kind):
                await self.pool_rpc(name, client, kind, method, args)

    async def dirty_restore(self, name: str, client, rnd: int) -> None:
        if self.fits(name, "dirty_restore"):
            await self.pool_rpc(name, client, "dirty_restore", POOL_METHOD, ["A", "auto"],
                                rnd, reset=True)

    async def storage_fill(self, name: str, client, rnd: int) -> None:
        if self.fits(name, "storage_fill"):
            await self.pool_rpc(name, client, "storage_fill", POOL_METHOD, ["A", "whole"],
                                rnd, reset=True)

    async def audit(self, name: str, client, rnd: int) -> None:
        """The run's-end audit: the whole pool against the pattern, after a dirty restore
        of the last point (so every block is expected to hold the pattern)."""
        await self.dirty_restore(name, client, rnd)
        if self.fits(name, "audit"):
            await self.pool_rpc(name, client, "audit", "residue_lab_audit", ["A"], rnd)
