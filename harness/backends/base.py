"""The backend protocol: where data points run.

A backend is told which points to run and the driver to report them to; it never writes
a record, a counter or the manifest itself (``harness.run.driver`` does). ``check`` runs
while the sweep is being built and raises ``UsageError`` / ``CannotRun`` then, never per
point; ``describe`` is what the manifest's ``backend`` says about where the run ran.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:  # types only: the registry must import without the run layer
    from ..settings.sweep_options import SweepOptions
    from ..run.driver import Driver
    from ..run.plan import Point

__all__ = ["Backend", "run_slot_workers"]


@runtime_checkable
class Backend(Protocol):
    name: str

    def check(self, opts: "SweepOptions") -> None:
        """Validate ``opts`` for this backend (one-line ``UsageError``)."""

    async def run(self, points: Sequence["Point"], driver: "Driver") -> None:
        """Run every point, reporting each to ``driver``."""

    def describe(self) -> dict[str, Any]:
        """What the manifest records about this backend, once ``run`` has started."""


async def run_slot_workers(slots: Sequence[Any], worker: Callable[[Any], Awaitable[None]],
                           prefix: str) -> None:
    """One task per slot until all are done; when one fails or the sweep is cancelled, the
    others are cancelled and awaited, so no worker outlives the backend's ``run``."""
    tasks = [asyncio.create_task(worker(slot), name=f"{prefix}-{slot.id}") for slot in slots]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
