"""What runs next: the order in which slots take data points.

Kept apart from how a server lives and dies (``server_pool``) and from what a point does
(``residue_sweep.PointRunner``), as pytest-xdist keeps its scheduling policies apart from
worker management. One shared pool, so a slow point never idles another slot (work
stealing).

``fresh`` isolation (``affinity=False``): every point boots its own server, so a slot simply
takes the next point in plan order.

``reset``/``shared`` isolation (``affinity=True``): a server is reused, so

1. a slot keeps taking points of the configuration its server already runs;
2. a slot without one (its configuration is done, or its server died) takes the open
   configuration nobody is serving yet with the most points left, so each configuration
   boots about once per slot that serves it rather than once per slot per configuration;
3. when every open configuration is served, the slot may help with one, which costs it a
   boot of a new server. It helps only where that is expected to finish sooner. With ``n``
   slots serving configuration ``c``, ``left`` of its points not yet taken, ``point`` the
   mean measured time of one point on a running server and ``boot`` the mean measured
   boot time (both of ``c`` where measured, else over all configurations)::

       help with c  iff  left * point / n  >  boot + point

   the serving slots alone need ``left * point / n``; a helper's first point is done only
   after ``boot + point``, so it is of use only if they would not have finished by then.
   Of the configurations worth helping, it takes the one expected to finish last. Until
   both a boot and a point time are measured (the first wave), it helps as it always did:
   with the one with the most points left. A slot that helps with none gets ``None`` and
   finishes (its server is stopped), as when the pool is empty; the configurations it
   leaves keep their serving slots, so no point is left behind. On the CPU lab engine
   (boot ~0.3 s) slots still help; on vLLM on a GPU (boot ~290 s, point ~0.4 s) a slot
   does not boot a second server to take a few seconds' work.

Timings come in through ``observe`` as the sweep measures them.
"""
from __future__ import annotations

from collections import OrderedDict, defaultdict, deque
from typing import Generic, Hashable, Iterable, Protocol, TypeVar

__all__ = ["HasConfig", "PointQueue"]


class HasConfig(Protocol):
    cfg_id: str


P = TypeVar("P", bound=HasConfig)


class _Mean:
    """Running mean of one kind of measured time, per configuration and over all."""

    def __init__(self) -> None:
        self._sum: dict[str, float] = defaultdict(float)
        self._n: dict[str, int] = defaultdict(int)

    def add(self, cfg_id: str, seconds: float) -> None:
        self._sum[cfg_id] += seconds
        self._n[cfg_id] += 1

    def __bool__(self) -> bool:
        return bool(self._n)

    def of(self, cfg_id: str) -> float:
        """The mean for ``cfg_id`` where measured, else over all configurations."""
        if cfg_id in self._n:
            return self._sum[cfg_id] / self._n[cfg_id]
        return sum(self._sum.values()) / sum(self._n.values())


class PointQueue(Generic[P]):
    def __init__(self, points: Iterable[P], *, affinity: bool):
        self.affinity = affinity
        self._by_cfg: "OrderedDict[str, deque[P]]" = OrderedDict()
        for p in points:
            self._by_cfg.setdefault(p.cfg_id, deque()).append(p)
        self._serving: dict[Hashable, str] = {}   # slot -> configuration its server runs
        self._boot = _Mean()    # seconds from start to ready of a server
        self._point = _Mean()   # seconds of one point on a running server

    def __len__(self) -> int:
        return sum(len(q) for q in self._by_cfg.values())

    def observe(self, cfg_id: str, *, boot: float | None = None,
                point: float | None = None) -> None:
        """A measured boot of a server of ``cfg_id`` and/or time of one of its points
        (boot excluded): what deciding whether to help with a configuration goes by."""
        if boot is not None:
            self._boot.add(cfg_id, boot)
        if point is not None:
            self._point.add(cfg_id, point)

    def next(self, slot: Hashable, current_cfg: str | None) -> P | None:
        """The next point for ``slot``, whose server (if any) runs ``current_cfg``; None
        when the pool is empty or, with affinity, no configuration is worth a new boot."""
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
        if unserved:
            pick = max(unserved, key=lambda c: len(self._by_cfg[c]))
        else:
            pick = self._worth_helping(open_cfgs)
            if pick is None:
                return None
        self._serving[slot] = pick
        return self._by_cfg[pick].popleft()

    def _worth_helping(self, served: list[str]) -> str | None:
        """Of these served configurations, the one a new server helps most (see the module
        docstring); without measured times, the one with the most points left."""
        if not (self._boot and self._point):   # nothing measured yet: help as before
            return max(served, key=lambda c: len(self._by_cfg[c]))
        best, best_finish = None, 0.0
        for cfg in served:
            point = self._point.of(cfg)
            n = sum(1 for c in self._serving.values() if c == cfg)
            finish = len(self._by_cfg[cfg]) * point / n   # the serving slots on their own
            if finish > self._boot.of(cfg) + point and finish > best_finish:
                best, best_finish = cfg, finish
        return best

    def left(self, cfg_id: str) -> int:
        """Points of ``cfg_id`` not yet taken."""
        return len(self._by_cfg.get(cfg_id) or ())

    def unserved(self) -> list[str]:
        """Open configurations no slot serves yet."""
        served = set(self._serving.values())
        return [c for c, q in self._by_cfg.items() if q and c not in served]

    def release(self, slot: Hashable) -> None:
        """``slot`` serves nothing of this queue any more (it took other work)."""
        self._serving.pop(slot, None)

    def add(self, point: P) -> None:
        """One more point, at the end of its configuration's queue (e.g. an auto run's
        fresh confirmation of a reset point that was not ok)."""
        self._by_cfg.setdefault(point.cfg_id, deque()).append(point)

    def drain(self, cfg_id: str) -> list[P]:
        """Take every remaining point of a configuration out of the pool."""
        q = self._by_cfg.get(cfg_id)
        if not q:
            return []
        out = list(q)
        q.clear()
        return out
