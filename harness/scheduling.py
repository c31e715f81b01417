"""What runs next: the order in which slots take data points.

Kept apart from how a server lives and dies (``server_pool``) and from what a point does
(``residue_sweep.PointRunner``), as pytest-xdist keeps its scheduling policies apart from
worker management. One shared pool, so a slow point never idles another slot (work
stealing); with ``reset``/``shared`` isolation a slot keeps taking points of the
configuration its server already runs, and an idle slot takes a configuration nobody is
serving yet before it helps with one that is, so each configuration boots about once per
slot that serves it rather than once per slot per configuration.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from typing import Generic, Hashable, Iterable, Protocol, TypeVar


class HasConfig(Protocol):
    cfg_id: str


P = TypeVar("P", bound=HasConfig)


class PointQueue(Generic[P]):
    def __init__(self, points: Iterable[P], *, affinity: bool):
        self.affinity = affinity
        self._by_cfg: "OrderedDict[str, deque[P]]" = OrderedDict()
        for p in points:
            self._by_cfg.setdefault(p.cfg_id, deque()).append(p)
        self._serving: dict[Hashable, str] = {}   # slot -> configuration its server runs

    def __len__(self) -> int:
        return sum(len(q) for q in self._by_cfg.values())

    def next(self, slot: Hashable, current_cfg: str | None) -> P | None:
        """The next point for ``slot``, whose server (if any) runs ``current_cfg``."""
        if not self.affinity:
            for cfg, q in self._by_cfg.items():   # plan order
                if q:
                    return q.popleft()
            return None
        if current_cfg and self._by_cfg.get(current_cfg):
            self._serving[slot] = current_cfg
            return self._by_cfg[current_cfg].popleft()
        self._serving.pop(slot, None)
        open_cfgs = [c for c, q in self._by_cfg.items() if q]
        if not open_cfgs:
            return None
        served = set(self._serving.values())
        unserved = [c for c in open_cfgs if c not in served]
        pick = max(unserved or open_cfgs, key=lambda c: len(self._by_cfg[c]))
        self._serving[slot] = pick
        return self._by_cfg[pick].popleft()

    def drain(self, cfg_id: str) -> list[P]:
        """Take every remaining point of a configuration out of the pool."""
        q = self._by_cfg.get(cfg_id)
        if not q:
            return []
        out = list(q)
        q.clear()
        return out
