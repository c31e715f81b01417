"""Where a server runs: a CPU slot or one GPU. A plain value, so options, adapters and
backends name slots without importing process management (``server_pool``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["Slot"]


@dataclass(frozen=True)
class Slot:
    """Where a server runs: a CPU slot or one GPU (``CUDA_VISIBLE_DEVICES``)."""

    id: str
    gpu: str | None = None

    @classmethod
    def cpu(cls, n: int) -> list["Slot"]:
        return [cls(f"cpu{i}") for i in range(n)]

    @classmethod
    def gpus(cls, ids: Sequence[str]) -> list["Slot"]:
        """One slot per entry; a GPU named twice runs two servers side by side
        (``--gpus 0,0`` on a GPU with room for both: size their memory with the engine's
        own flags)."""
        seen: dict[str, int] = {}
        out = []
        for g in ids:
            n = seen.get(str(g), 0)
            seen[str(g)] = n + 1
            out.append(cls(f"gpu{g}" + (f".{n}" if n else ""), gpu=str(g)))
        return out
