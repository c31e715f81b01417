"""What runs next: work stealing, and configuration affinity for reused servers."""
from dataclasses import dataclass

from harness.scheduling import PointQueue


@dataclass
class P:
    cfg_id: str
    residue: int


def points(cfgs="AB", n=4):
    return [P(c, r) for c in cfgs for r in range(n)]


def test_fresh_isolation_takes_points_in_plan_order():
    q = PointQueue(points(), affinity=False)
    got = [q.next("s0", None) for _ in range(8)]
    assert [(p.cfg_id, p.residue) for p in got] == [(c, r) for c in "AB" for r in range(4)]
    assert q.next("s0", None) is None and len(q) == 0


def test_affinity_keeps_a_slot_on_its_configuration_and_spreads_idle_slots():
    q = PointQueue(points("AB", 4), affinity=True)
    a = q.next("s0", None)
    b = q.next("s1", None)
    assert a.cfg_id != b.cfg_id            # the idle slot takes the unserved configuration
    for _ in range(3):
        assert q.next("s0", a.cfg_id).cfg_id == a.cfg_id
        assert q.next("s1", b.cfg_id).cfg_id == b.cfg_id
    assert q.next("s0", a.cfg_id) is None


def test_affinity_steals_when_its_own_configuration_is_done():
    q = PointQueue(points("AB", 3) + [P("B", 9), P("B", 10)], affinity=True)
    first = {s: q.next(s, None) for s in ("s0", "s1")}
    cur = {s: p.cfg_id for s, p in first.items()}
    seen = []
    while len(q):
        for s in ("s0", "s1"):
            p = q.next(s, cur[s])
            if p is not None:
                cur[s] = p.cfg_id
                seen.append((s, p.cfg_id))
    # the slot that finished A helped with B instead of idling
    assert {c for s, c in seen} == {"A", "B"}
    assert sum(1 for s, c in seen if c == "B") == 4


def test_drain_removes_a_configuration():
    q = PointQueue(points("AB", 3), affinity=False)
    assert [p.residue for p in q.drain("A")] == [0, 1, 2]
    assert len(q) == 3 and q.next("s0", None).cfg_id == "B"
