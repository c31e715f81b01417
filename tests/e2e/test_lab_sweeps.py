"""The product, end to end: full 128-residue sweeps of the lab engine through the real
CLI, one fresh server per data point (issue 3's 'done when').

The two 128-residue sweeps each prove what only a sweep of every residue proves, once: mtp
k = 3 unpatched breaks residue 4 and no other of 128; dflash2 k = 7 unpatched breaks residue
8 and no other. The fix (``--patches all``) is checked where it can change a dispatch: the
prefill discriminator answers differently from the shape test only for a final prefill
chunk of exactly ``1 + k`` tokens, which only the rule's residue has, so a patched sweep of
the other residues would re-run what the unpatched sweep already proved clean on the same
code path. It runs at the rule's residue, its neighbours and the edges (``risky``), cold
and on a hit, on fresh servers.
"""
from __future__ import annotations

from collections import defaultdict

import pytest

pytestmark = pytest.mark.usefixtures("no_leftovers")


def run_sweep(cli, *args: str, slots: str = "1", timeout: float = 900) -> tuple:
    """A lab sweep through ``cli`` on ``slots`` slots: its process and its records."""
    proc = cli.sweep("--slots", slots, *args, lab_model=True, timeout=timeout)
    assert len(list((cli.tmp / "results").glob("*.jsonl"))) == 1, proc.stderr[-3000:]
    return proc, cli.records()


def reasons(recs: list[dict]) -> list[str]:
    """Every cell that is not ok, with the record's reason: what an assertion on
    ``bad_cells`` prints when a cell it did not expect turns up (CI found residue 53 of the
    dflash2 sweep invalid once, in both phases, and the tmp dir was gone by then)."""
    return [f"{r['config']['patches']} r{r['residue']} {r['phase']}: {r['verdict']}: "
            f"{r.get('reason')} (server {r.get('server_boot', {}).get('log')})"
            for r in recs if r["verdict"] != "ok"]


def bad_cells(recs: list[dict]) -> dict[str, set[tuple[int, str]]]:
    out: dict[str, set] = defaultdict(set)
    for r in recs:
        out[r["config"]["patches"]]  # every configuration appears
        if r["verdict"] != "ok":
            out[r["config"]["patches"]].add((r["residue"], r["phase"], r["verdict"]))
    return out


@pytest.mark.slow
def test_mtp_full_graphs_unpatched_breaks_exactly_residue_4_of_128(cli):
    proc, recs = run_sweep(cli, "--spec", "mtp", "--ctx", "huge", "--residues", "all",
                           "--cudagraph", "FULL_AND_PIECEWISE", "--patches", "none",
                           slots="2")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert len(recs) == 128 * 2
    assert bad_cells(recs) == {"none": {(4, "self-hit", "broken")}}, reasons(recs)
    r4 = next(r for r in recs if r["residue"] == 4 and r["phase"] == "self-hit")
    assert r4["computed_tail"] == 4 and r4["finish_reason"] == "stop"
    assert len(r4["answer"]) <= 1
    assert all(r["cached_tokens"] == 0 for r in recs if r["phase"] == "cold")
    assert all(r["prompt_tokens"] == r["target_len"] for r in recs)
    assert {r["target_len"] % 128 for r in recs} == set(range(128))
    assert "residue 4" in cli.report()


def test_the_fix_holds_where_it_can_change_the_dispatch(cli):
    """--patches all at the rule's residue (4 = k + 1), its neighbours and the edges, the
    unpatched configuration beside it in the same run: only the unpatched residue 4 hit
    breaks, and the patched one is verbatim."""
    proc, recs = run_sweep(cli, "--spec", "mtp", "--ctx", "huge", "--residues", "risky",
                           "--cudagraph", "FULL_AND_PIECEWISE", "--patches", "none,all",
                           slots="2")
    assert proc.returncode == 1, proc.stderr[-2000:]
    residues = {0, 1, 3, 4, 5, 127}
    assert {(r["config"]["patches"], r["residue"], r["phase"]) for r in recs} == {
        (p, res, ph) for p in ("none", "all") for res in residues for ph in ("cold", "self-hit")}
    assert bad_cells(recs) == {"none": {(4, "self-hit", "broken")}, "all": set()}, reasons(recs)
    fixed = next(r for r in recs if r["residue"] == 4 and r["phase"] == "self-hit"
                 and r["config"]["patches"] == "all")
    assert fixed["computed_tail"] == 4 and fixed["verdict"] == "ok"
    assert all(r["cached_tokens"] == 0 for r in recs if r["phase"] == "cold")
    assert all(r["prompt_tokens"] == r["target_len"] for r in recs)


@pytest.mark.slow
def test_dflash2_k7_breaks_exactly_residue_8_of_128(cli):
    """Still one fresh server per point, each forked from a parent that imported the lab
    engine once (``--launcher prefork``: the same answers, about half the CPU of 128
    plain starts); the mtp sweep above starts its servers the default way."""
    proc, recs = run_sweep(cli, "--spec", "dflash2", "--draft-tokens", "7", "--ctx", "huge",
                           "--residues", "all", "--cudagraph", "FULL_AND_PIECEWISE",
                           "--patches", "none", "--launcher", "prefork", slots="2")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert len(recs) == 128 * 2
    assert {r["server_boot"]["launcher"] for r in recs} == {"forked"}
    assert len({r["server_boot"]["log"] for r in recs}) == 128   # a server per point
    assert bad_cells(recs) == {"none": {(8, "self-hit", "broken")}}, reasons(recs)
    r8 = next(r for r in recs if r["residue"] == 8 and r["phase"] == "self-hit")
    assert r8["computed_tail"] == 8
    assert {r["target_len"] % 128 for r in recs} == set(range(128))


def test_main_job_preset_is_clean(cli):
    # sweep --spec mtp --ctx huge: the preset keeps PIECEWISE, so every cell is clean
    proc, recs = run_sweep(cli, "--spec", "mtp", "--ctx", "huge", "--residues", "risky")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {r["verdict"] for r in recs} == {"ok"}
    assert recs[0]["config"]["cudagraph_mode"] == "PIECEWISE"
    assert recs[0]["config_mismatch"] == []


@pytest.mark.slow
@pytest.mark.parametrize("isolation,servers", [("reset", 1), ("shared", 1), ("fresh", 5)])
def test_isolation_modes_agree_on_the_lab(cli, isolation, servers):
    proc, recs = run_sweep(cli, "--spec", "mtp", "--ctx", "huge", "--residues", "2-6",
                           "--cudagraph", "FULL_AND_PIECEWISE", "--patches", "none",
                           "--isolation", isolation)
    logs = list((cli.tmp / "results").glob("*.logs/*.log"))
    assert len(logs) == servers
    bad = {(r["residue"], r["phase"]): r["verdict"] for r in recs if r["verdict"] != "ok"}
    if isolation == "shared":
        # nothing resets the cache: a later cold request may hit what an earlier point
        # left behind, and the harness must say so instead of calling it cold
        assert all(v in ("broken", "invalid") for v in bad.values())
        assert bad.get((4, "self-hit")) == "broken"
    else:
        assert bad == {(4, "self-hit"): "broken"}
        assert all(r["cached_tokens"] == 0 for r in recs if r["phase"] == "cold")
    assert all(r["isolation"] == isolation for r in recs)


@pytest.mark.slow
def test_reset_isolation_boots_each_configuration_about_once(cli):
    proc = cli.sweep("--slots", "2", "--isolation", "reset", "--residues", "0-7",
                     "--cudagraph", "FULL_AND_PIECEWISE,PIECEWISE", "--patches", "none",
                     lab_model=True)
    assert proc.returncode == 1, proc.stderr[-2000:]
    out = cli.tmp / "results"
    # 2 configurations on 2 slots: one server each, plus at most one more when a slot that
    # finished its configuration helps with the other
    assert 2 <= len(list(out.glob("*.logs/*.log"))) <= 3
    recs = cli.records()
    bad = {(r["config"]["cudagraph_mode"], r["residue"], r["phase"]) for r in recs
           if r["verdict"] != "ok"}
    assert bad == {("FULL_AND_PIECEWISE", 4, "self-hit")}
