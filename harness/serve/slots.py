"""Where a server runs: a CPU slot, one GPU or a group of GPUs (one tensor-parallel
server across them: ``--gpus 0+1,2+3``). A plain value, so options, adapters and
backends name slots without importing process management (``server_pool``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["Slot", "one_slot_args"]


@dataclass(frozen=True)
class Slot:
    """Where a server runs: a CPU slot, or the GPUs of ``gpu`` (its
    ``CUDA_VISIBLE_DEVICES``: one id, or a group's ids joined by commas, ``0,1``)."""

    id: str
    gpu: str | None = None

    @property
    def tensor_parallel_size(self) -> int:
        """How many GPUs one server of this slot spans (1 for a CPU slot or one GPU)."""
        return len(self.gpu.split(",")) if self.gpu else 1

    @classmethod
    def cpu(cls, n: int) -> list["Slot"]:
        return [cls(f"cpu{i}") for i in range(n)]

    @classmethod
    def gpus(cls, ids: Sequence[str]) -> list["Slot"]:
        """One slot per entry, an entry one GPU id or a group ``0+1`` (one server across
        them); an entry named twice runs two servers side by side (``--gpus 0,0`` on a
        GPU with room for both: size their memory with the engine's own flags)."""
        seen: dict[str, int] = {}
        out = []
        for g in ids:
            n = seen.get(str(g), 0)
            seen[str(g)] = n + 1
            out.append(cls(f"gpu{g}" + (f".{n}" if n else ""),
                           gpu=",".join(str(g).split("+"))))
        return out


def one_slot_args(slots: Sequence[Slot] | None) -> list[str]:
    """A rerun's one slot: a GPU group when the sweep's servers span several GPUs (the
    point reruns at its TP size), else one slot."""
    group = next((s.gpu for s in slots or () if s.tensor_parallel_size > 1), None)
    return ["--gpus", group.replace(",", "+")] if group else ["--slots", "1"]
