"""What an ``--isolation`` value *does* to a server: the machinery behind the names of
``names/isolation.py``. A reused server gets, before its next point, what its value's
``Machinery.prepare`` does (``reset``: a prefix-cache reset; ``restore``: the server returned
to its just-booted state, harness/serve/restore.py), and a just-booted one the note its
``booted`` writes. A value that does nothing to a server has no entry here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ..names.isolation import IsolationName
from .facts import ServerFacts

__all__ = ["Machinery", "MACHINERY", "machinery"]

# (client, server, info) -> seconds to record under ``timing[name]``, or None; ``info``
# is what the point's records carry about its server (e.g. ``reset_error``).
Prepare = Callable[[Any, Any, ServerFacts], Awaitable["float | None"]]


async def _reset_prefix_cache(client: Any, server: Any, info: ServerFacts) -> None:
    """``reset``: the prefix cache emptied; a failure is recorded, not fatal (the next cold
    request's ``cached_tokens`` proves the reset or not)."""
    from .client import ClientError
    try:
        await client.reset_prefix_cache()
        info.reset_error = None
    except ClientError as e:
        info.reset_error = str(e)
    return None


async def _restore(client: Any, server: Any, info: ServerFacts) -> float:
    """``restore``: the reused server returned to its just-booted state (harness/serve/restore.py:
    sleep level 1, wake up, reset, each step proven); what was proven goes into
    ``info.restore``. Its seconds.

    A step that fails leaves a server nobody can trust: on vLLM 0.26.0 (the H200, 13 servers
    on one GPU) the worker's sleep asserted "Memory usage increased after sleeping" (it
    compares the device's free memory, which other servers changed meanwhile) after the
    engine had paused its scheduler and cumem had discarded the memory; a wake-up then finds
    the executor not asleep and maps nothing back, and a request sent there waited in the
    paused engine until the 120 s timeout. So no request goes there: ``info.unusable``
    tells the backend to stop that server and run the point on a just-booted one (which is
    what a restore stands in for), and that point's record names the failed restore."""
    import time
    from .client import ClientError
    from .poison import refill
    from .restore import RestoreFailed, restore_by_fill, restore_server
    t0 = time.monotonic()
    try:
        if info.fill_restores:   # the engine's fill stands for a boot: no weights moved
            info.restore = await restore_by_fill(client, info.poison)
        else:
            info.restore = await restore_server(client, server.log_path)
            if (info.poison or {}).get("mode") == "on":
                # a wake maps new memory: fill it again, so the record's poison claim holds
                info.restore["fill"] = await refill(client, info.poison, whole=True)
    except (RestoreFailed, ClientError) as e:
        info.restore = {"means": "failed", "error": str(e),
                        **({"checks": e.checks} if getattr(e, "checks", None) else {})}
        info.unusable = f"restore failed on the reused server (replaced): {e}"
    return round(time.monotonic() - t0, 4)


def _just_booted(info: ServerFacts, replaced: str | None = None) -> None:
    """``restore``: a just-booted server needs no restore; its records say so, and why
    the server is new when it replaced one whose restore failed."""
    info.restore = {"means": "boot", "s": 0.0}
    if replaced:
        info.restore["replaced"] = replaced



@dataclass(frozen=True)
class Machinery:
    prepare: Prepare | None = None    # what a reused server gets before the next point
    booted: Callable[[ServerFacts, str | None], None] | None = None   # a just-booted one's note


# One entry per isolation value that acts on a server (its name: names/isolation.POLICIES).
MACHINERY: dict[str, Machinery] = {
    IsolationName.RESTORE: Machinery(prepare=_restore, booted=_just_booted),
    IsolationName.RESET: Machinery(prepare=_reset_prefix_cache),
}
_NOTHING = Machinery()


def machinery(name: str) -> Machinery:
    """What isolation ``name`` does to a server (nothing, for a value without an entry)."""
    return MACHINERY.get(name, _NOTHING)
