"""``--poison auto|on|off``: fill the memory a stale read can reach with a fixed pattern
right after a server is ready (before its first request) and at every restore, and keep the
proof in every record (docs/isolation.md, "Poisoning").

The fill is the engine's: a vLLM server loads ``engine.vllm.poison.PoisonWorker`` as its
worker extension and serves vLLM's dev-mode ``POST /collective_rpc``; the lab serves the
same route and methods (engine/lab/poison.py). The harness calls ``residue_lab_arm`` (the
bookkeeping as the boot left it; the worker starts following the blocks its steps are
given) and then ``residue_lab_restore_pool(PATTERN, "whole")``: every KV storage filled once
(``engine/vllm/pool_fill.py``). At a restore it calls ``residue_lab_restore_pool(PATTERN,
"auto")``: the blocks and state slots the point's requests were given, refilled and proven,
the whole pool re-proven every ``AUDIT_EVERY`` restores (engine/poison_pattern.py), or the
whole fill where the dirty set cannot be known; ``restored`` in the fill's record says which
ran, why, the bytes and blocks, and the audit's result (issue 51). A fill is trusted only
where every region's checksum after the fill equals the one the pattern predicts. A fill that is not proven makes the point ``infra``: the server ran, but not as
the record would claim.

What it proves on real vLLM (the H200, docs/isolation.md): the fill is invisible to correct
answers, and with the kernel choices fixed (engine/vllm/determinism.py, which the vLLM
adapter adds with the mode) every server of one compile cache gives one answer per broken
cell and a restore by the fill gives a server its fresh answer back; across machines (other
compiles) ngram cells can still differ. On the lab the fill alone does it: the lab's stale
state slots are what the fill covers.
"""
from __future__ import annotations

import time
from typing import Any

from engine.poison_pattern import MODE_REGIONS

from .client import ClientError

__all__ = ["MODES", "REGIONS", "PATTERN", "RESTORE_METHOD", "restored", "FILL_MEANS", "NOT_SUPPORTED", "WORKER_ARGS",
           "why_not", "mode_for", "off_record", "at_boot", "refill", "failure", "proven", "summary"]

MODES = ("auto", "on", "off")
REGIONS = ",".join(MODE_REGIONS)  # the same on every engine (engine/poison_pattern.py)
PATTERN = "A"
RESTORE_METHOD = "residue_lab_restore_pool"     # engine/vllm/pool_restore.py, engine/lab/poison.py
POOL_REGIONS = {"pool", "builders"}             # its proof's regions: state and kv are the pool
FILL_MEANS = "reset+poison-fill"  # --isolation restore by the fill: no weights moved
NOT_SUPPORTED = "not supported by this engine"
# a vLLM server's worker extension: the fill's RPC methods (engine/vllm/poison.py)
WORKER_ARGS = ("--worker-extension-cls", "engine.vllm.poison.PoisonWorker")


def why_not(adapter_cls: Any, extra_args: tuple[str, ...] = (), url: bool = False) -> str | None:
    """Why servers of this engine cannot be filled (None: they can): a running server
    (``--url``) served requests before the sweep; an engine without the fill (``cmd``); a
    vLLM line that loads its own worker extension (vLLM takes one class)."""
    if url:
        return "--url sweeps a server the sweep did not start (it cannot be filled before its first request)"
    if getattr(adapter_cls, "poison_means", None) is None:
        return f"--engine {adapter_cls.name} has no fill (it needs the residue_lab_restore_pool RPC)"
    if any(a.split("=", 1)[0] == WORKER_ARGS[0] for a in extra_args):
        return f"{WORKER_ARGS[0]} is in --engine-arg: vLLM loads one worker extension"
    return None


def mode_for(requested: str, why_not: str | None) -> bool:
    """Whether a run's servers are poisoned: ``on`` / ``auto`` where the engine can
    (``why_not`` None); ``--poison on`` where it cannot is refused before (options.py)."""
    return requested != "off" and why_not is None


def off_record(requested: str) -> dict[str, Any]:
    """The ``poison`` field of a record whose server was not filled."""
    if requested == "off":
        return {"mode": "off"}
    return {"mode": "off", "why": NOT_SUPPORTED}


def proven(proof: Any) -> bool:
    """A fill's answer proves it: every region's checksum is the one predicted, and the
    whole-pool audit, where one ran, found the pattern everywhere."""
    if not isinstance(proof, dict) or not proof.get("ok"):
        return False
    regions = proof.get("regions")
    if not isinstance(regions, dict) or set(regions) not in (set(REGIONS.split(",")), POOL_REGIONS):
        return False
    audit = proof.get("audit")
    if audit is not None and not (isinstance(audit, dict) and audit.get("ok")
                                  and audit.get("checksum") == audit.get("expected")):
        return False
    return all(isinstance(r, dict) and r.get("ok") and r.get("checksum") == r.get("expected")
               for r in regions.values())


def restored(proof: Any) -> dict[str, Any] | None:
    """What a fill restored, as the record keeps it: ``means`` (``dirty``: the blocks the
    point was given; ``storage-fill``: every storage), ``why`` the whole fill stood in,
    bytes, blocks, and the audit's result (None: no audit at this restore)."""
    if not isinstance(proof, dict) or "means" not in proof:
        return None
    done = proof.get("restored") or {}
    audit = proof.get("audit")
    return {"means": proof["means"], "why": proof.get("why"), "bytes": done.get("bytes"),
            "blocks": done.get("blocks"),
            "audit": None if audit is None else bool(isinstance(audit, dict) and audit.get("ok"))}


async def _fill(client: Any, at: str, how: str) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        proof = await client.collective_rpc(RESTORE_METHOD, PATTERN, how)
    except ClientError as e:
        return {"at": at, "ok": False, "error": f"{RESTORE_METHOD}: {e}"}
    ok = proven(proof)
    out = {"at": at, "ok": ok, "s": round(time.monotonic() - t0, 4), "proof": proof}
    if restored(proof) is not None:
        out["restored"] = restored(proof)
    if not ok:
        out["error"] = "the fill's checksums do not prove the pattern in every region"
    return out


async def at_boot(client: Any, kernels: dict[str, Any] | None = None) -> dict[str, Any]:
    """Arm, then fill: the ``poison`` record of a just-booted server; ``kernels``: what
    fixed its kernels' choices (vLLM: engine/vllm/determinism.py), kept beside the fills."""
    out: dict[str, Any] = {"mode": "on", "regions": REGIONS, "pattern": PATTERN}
    if kernels is not None:
        out["kernels"] = kernels
    try:
        out["armed"] = await client.collective_rpc("residue_lab_arm")
    except ClientError as e:
        out["fills"] = [{"at": "boot", "ok": False, "error": f"residue_lab_arm: {e}"}]
        return out
    out["fills"] = [await _fill(client, "boot", "whole")]
    return out


async def refill(client: Any, poison: dict[str, Any], whole: bool = False) -> dict[str, Any]:
    """The fill at a restore; the record keeps the boot fill and this one. ``whole``: every
    storage (after a sleep cycle, which discarded the pool), else the dirty set."""
    fill = await _fill(client, "restore", "whole" if whole else "auto")
    poison["fills"] = [*poison.get("fills", [])[:1], fill]
    return fill


def failure(poison: dict[str, Any] | None) -> str | None:
    """Why a record's fills do not hold (its point is then ``infra``), else None."""
    for f in (poison or {}).get("fills") or ():
        if not f.get("ok"):
            return f"poison fill at {f.get('at')} not proven: {f.get('error')}"
    return None


def summary(poison: dict[str, Any] | None) -> str:
    """The report's provenance words for one record's ``poison``."""
    if not poison:
        return "poison: not recorded (records before --poison)"
    if poison.get("mode") != "on":
        return f"poison: {poison.get('why') or 'off'}"
    return f"poison: on ({poison.get('regions')} filled with pattern {poison.get('pattern')})"
