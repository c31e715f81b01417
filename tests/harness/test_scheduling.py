"""What runs next: work stealing, and configuration affinity for reused servers."""
from collections import Counter
from dataclasses import dataclass

import pytest

from harness.run.scheduling import PointQueue
from tests.e2e.test_lab_sweeps import run_sweep


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



# -- helping with a served configuration costs a boot: only where it finishes sooner ----
def serving_ab(n=128, **timed):
    """Two configurations, one slot serving each; ``timed``: the boot and point times
    measured so far (none: the first wave)."""
    q = PointQueue(points("AB", n), affinity=True)
    assert q.next("s0", None).cfg_id == "A" and q.next("s1", None).cfg_id == "B"
    for cfg in "AB":
        q.observe(cfg, **timed)
    return q


def drain_slot(q, slot, cfg):
    """Every point ``slot``, serving ``cfg``, takes until the queue gives it none."""
    got = []
    while (p := q.next(slot, cfg)) is not None:
        got.append(p)
        cfg = p.cfg_id
    return got


def test_a_gpu_boot_is_not_worth_taking_points_of_a_served_configuration():
    # vLLM on a GPU: 290 s a boot, 0.4 s a point; the 127 points left of either
    # configuration are ~51 s for the slot serving it, less than a second server's boot.
    q = serving_ab(boot=290.0, point=0.4)
    assert q.next("s2", None) is None
    assert len(q) == 2 * 127           # declining took nothing out of the pool
    assert [p.cfg_id for p in drain_slot(q, "s0", "A")] == ["A"] * 127


def test_a_cheap_boot_helps_with_many_points_left():
    # the CPU lab engine: 0.3 s a boot, 1 s a point, 127 points left of each
    q = serving_ab(boot=0.3, point=1.0)
    assert q.next("s2", None).cfg_id in "AB"
    assert q.next("s3", None).cfg_id in "AB"


def test_help_goes_where_it_saves_most_and_stops_when_it_saves_nothing():
    q = PointQueue(points("AB", 20), affinity=True)
    q.next("s0", None), q.next("s1", None)
    q.observe("A", boot=2.0, point=1.0)    # A: 19 left x 1 s / 1 slot = 19 s > 2 + 1
    q.observe("B", boot=2.0, point=0.1)    # B: 19 left x 0.1 s / 1 slot = 1.9 s < 2 + 0.1
    assert q.next("s2", None).cfg_id == "A"
    assert q.next("s3", None).cfg_id == "A"   # 18 x 1 / 2 = 9 s > 3 s: a third server
    for _ in range(9):
        assert q.next("s0", "A").cfg_id == "A"
    assert q.next("s4", None) is None         # 8 x 1 / 3 = 2.7 s < 3 s: no fourth


def test_unserved_configurations_are_taken_first_whatever_the_timing():
    q = PointQueue(points("ABC", 4), affinity=True)
    q.observe("A", boot=290.0, point=0.4)
    assert sorted(q.next(s, None).cfg_id for s in ("s0", "s1", "s2")) == ["A", "B", "C"]
    # a slot done with its configuration moves on to one nobody serves, however dear
    q = PointQueue(points("AB", 3), affinity=True)
    q.observe("A", boot=290.0, point=0.4)
    assert [p.cfg_id for p in drain_slot(q, "s0", None)] == ["A"] * 3 + ["B"] * 3


@pytest.mark.parametrize("timed", [{}, {"point": 0.4}, {"boot": 290.0}])
def test_until_a_boot_and_a_point_are_measured_an_idle_slot_helps_as_before(timed):
    q = serving_ab(4, **timed)
    q.next("s0", "A")                     # A has 2 left, B 3: the one with the most
    assert q.next("s2", None).cfg_id == "B"


def test_slots_that_decline_lose_no_point_and_do_none_twice():
    plan = points("ABCD", 16)
    q = PointQueue(plan, affinity=True)
    first = {s: q.next(s, None) for s in ("s0", "s1", "s2", "s3")}
    for cfg in "ABCD":
        q.observe(cfg, boot=290.0, point=0.4)
    done = list(first.values())
    for s, p in first.items():            # each finishes its own, then declines the rest
        got = drain_slot(q, s, p.cfg_id)
        assert {g.cfg_id for g in got} == {p.cfg_id}
        done += got
    assert Counter((p.cfg_id, p.residue) for p in done) == Counter(
        (p.cfg_id, p.residue) for p in plan)
    assert len(q) == 0


def test_a_slot_whose_configuration_failed_to_boot_boots_no_other_for_nothing():
    q = PointQueue(points("AB", 3), affinity=True)
    q.observe("A", boot=290.0, point=0.4)
    assert q.next("s0", None).cfg_id == "A" and q.next("s1", None).cfg_id == "B"
    assert [p.residue for p in q.drain("B")] == [1, 2]
    assert q.next("s1", None) is None     # A: 2 points left for the slot serving it
    assert [p.residue for p in drain_slot(q, "s0", "A")] == [1, 2]


# -- end to end: the lab engine, reused servers ------------------------------------------
@pytest.mark.slow
@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.parametrize("slots", ["4", "6"])
def test_a_reset_matrix_records_every_point_exactly_once(cli, slots):
    # 4 configurations x 16 residues; 6 slots have two help in the first wave
    proc, recs = run_sweep(cli, "--cudagraph", "FULL_AND_PIECEWISE,PIECEWISE",
                           "--patches", "none,all", "--isolation", "reset",
                           "--residues", "0-15", "--context", "1200", slots=slots)
    assert proc.returncode == 1, proc.stderr[-2000:]   # residue 4 breaks without the fix
    cells = Counter((r["config_id"], r["residue"], r["phase"]) for r in recs)
    assert len(recs) == 128 and len(cells) == 128 and set(cells.values()) == {1}
    assert {r["residue"] for r in recs} == set(range(16))
    assert cli.manifest()["timing"]["points"] == 64
