"""``--poison auto|on|off`` (issue 32): the fill after boot and at every restore, its proof in
every record, a fill that is not proven making the point ``infra``, the refusals; and the
lab, whose stale state slots hold per-process contents (engine/lab/poison.py): two fresh
servers answer a cold-breaking cell differently without the mode and byte-identically with
it, while every ok answer is the same either way."""
from __future__ import annotations

import asyncio
import json
from collections import defaultdict

import httpx
import pytest

from engine.lab.block_pool import BlockPool
from engine.lab.poison import StaleMemory
from engine.lab.tokenizer import LabTokenizer
from harness.serve.engines import LAB_MODEL_DIR, VllmAdapter, make_adapter
from engine.presets import resolve
from engine.vllm.determinism import INDUCTOR_CONFIG, KERNEL_ENV, is_deterministic
from harness.server_pool import Slot
from tests.conftest import one_line_exit_2
from tests.harness.test_point_runner import answer, engine, make_point, run_point

# breaks cold on the lab (the final prefill chunk ends on an aligned block: 1 + k tokens)
BREAKS_COLD = ("--spec", "ngram", "--draft-tokens", "4", "--cudagraph", "FULL_AND_PIECEWISE",
               "--patches", "none", "--engine-arg=--mamba-cache-mode=align",
               "--residues", "4,5,6", "--context", "1200", "--seed", "0,1", "--slots", "2",
               "--isolation", "fresh")


def _proof(ok_kv: bool = True) -> dict:
    region = {"tensors": 2, "bytes": 64, "checksum": 10, "expected": 10, "ok": True}
    return {"pattern": "A", "seed": 0x5EED, "s": 0.001, "ok": ok_kv, "regions": {
        "state": dict(region), "builders": dict(region),
        "kv": {**region, "checksum": 10 if ok_kv else 11, "ok": ok_kv}}}


def _filled_point(tmp_path, tok_dir, proof):
    """One point on a fake server that serves the fill; the adapter is told it can."""
    opts, adapter, point = make_point(tmp_path, tok_dir)
    adapter.poison = True
    hit = point.plan.target_len - point.residue
    inner, _ = engine(point, lambda i, body: answer(point, point.plan.expected,
                                                    0 if i == 0 else hit))
    rpcs = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/collective_rpc":
            body = json.loads(request.content)
            rpcs.append(body)
            if body["method"] == "residue_lab_arm":
                return httpx.Response(200, json={"results": [{"builders": {"tensors": 1}}]})
            return httpx.Response(200, json={"results": [proof]})
        return inner(request)

    recs, _ = run_point(tmp_path, opts, adapter, point, handler)
    return recs, rpcs


def test_the_fill_runs_before_the_first_request_and_every_record_keeps_its_proof(tmp_path, tok_dir):
    recs, rpcs = _filled_point(tmp_path, tok_dir, _proof())
    assert rpcs == [{"method": "residue_lab_arm", "args": []},
                    {"method": "residue_lab_restore_pool", "args": ["A", "whole"]}]
    for rec in recs.values():
        assert rec["verdict"] == "ok"
        p = rec["poison"]
        assert (p["mode"], p["regions"], p["pattern"]) == ("on", "state,kv,builders", "A")
        assert [(f["at"], f["ok"]) for f in p["fills"]] == [("boot", True)]
        assert p["fills"][0]["proof"]["regions"]["kv"]["checksum"] == 10


def test_a_fill_whose_checksums_disagree_makes_the_point_infra_never_ok(tmp_path, tok_dir):
    """The engine's own ``ok`` is not trusted alone: a region whose checksum is not the
    predicted one fails the fill (the answer was right; the record would lie)."""
    proof = _proof(ok_kv=False)
    recs, _ = _filled_point(tmp_path, tok_dir, proof)
    for rec in recs.values():
        assert rec["verdict"] == "infra"
        assert rec["reason"].startswith("poison fill at boot not proven")
        assert "answer judged ok" in rec["reason"]
    # an engine that says ok over a region that disagrees is not believed either
    proof = {**_proof(), "regions": {**_proof()["regions"],
                                     "kv": {"ok": True, "checksum": 1, "expected": 2}}}
    recs, _ = _filled_point(tmp_path / "b", tok_dir, proof)
    assert {r["verdict"] for r in recs.values()} == {"infra"}


def test_a_server_the_mode_cannot_fill_says_why_in_each_record(tmp_path, tok_dir):
    opts, adapter, point = make_point(tmp_path, tok_dir)      # --engine cmd: auto
    assert adapter.poison is False
    hit = point.plan.target_len - point.residue
    handler, _ = engine(point, lambda i, body: answer(point, point.plan.expected,
                                                      0 if i == 0 else hit))
    recs, _ = run_point(tmp_path, opts, adapter, point, handler)
    assert {json.dumps(r["poison"]) for r in recs.values()} == {
        json.dumps({"mode": "off", "why": "not supported by this engine"})}


@pytest.mark.parametrize("args, needle", [
    (("--engine", "cmd", "--server-cmd", "x --port {port}"), "--engine cmd has no fill"),
    (("--url", "http://127.0.0.1:9"), "--url sweeps a server the sweep did not start"),
    (("--engine", "vllm", "--model", "/m", "--engine-arg=--worker-extension-cls=my.Ext"),
     "vLLM loads one worker extension"),
])
def test_poison_on_where_it_cannot_run_is_one_line_exit_2(cli, tok_dir, args, needle):
    if "--engine" in args and "cmd" in args:
        args = (*args, "--model", str(tok_dir))
    one_line_exit_2(cli("--poison", "on", *args, "--dry-run"), "--poison on:", needle)


@pytest.mark.parametrize("fixes", [True, False])
def test_vllm_servers_load_the_worker_extension_and_dev_mode_only_with_the_mode(tmp_path,
                                                                               monkeypatch, fixes):
    """With the mode, every vLLM server gets the worker extension and dev mode; where the
    installed vLLM can fix kernel choices (VLLM_TRITON_FORCE_FIRST_CONFIG) it also gets
    the switches and caches of engine/vllm/determinism.py, and its restore is the fill (no
    sleep mode); where it cannot, the record says why and restore sleeps as before."""
    monkeypatch.setattr("harness.serve.vllm_adapter.vllm_serves_sleep", lambda: True)
    monkeypatch.setattr("engine.vllm.determinism.vllm_fixes_kernels", lambda: fixes)
    cfg = resolve("ngram", "huge", engine="vllm", model="/m", patches="none")
    for mode, on in (("auto", True), ("on", True), ("off", False)):
        adapter = make_adapter("vllm", isolation="restore", work_dir=tmp_path, poison=mode,
                               cache_dir=tmp_path / "cc")
        assert isinstance(adapter, VllmAdapter) and adapter.poison is on
        argv, env = adapter.for_isolation("restore").command(cfg, 8000, Slot("gpu0", "0"))
        assert ("engine.vllm.poison.PoisonWorker" in argv) is on, mode
        assert env.get("VLLM_SERVER_DEV_MODE") == "1"
        fixed = on and fixes
        assert is_deterministic(env) is fixed, (mode, env)
        assert ("--enable-sleep-mode" in argv) is not fixed, mode
        assert adapter.fill_restores is fixed
        if fixed:   # caches apart from the tuned boots' (--cache-dir's own)
            assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "cc" / "deterministic-kernels" / "vllm")
            assert adapter.poison_kernels() == {"fixed": True, "env": KERNEL_ENV,
                                                "inductor": INDUCTOR_CONFIG,
                                                "cache": str(tmp_path / "cc" / "deterministic-kernels")}
        elif on:
            assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "cc" / "vllm")
            assert adapter.poison_kernels()["fixed"] is False
        else:
            assert adapter.poison_kernels() is None
        cc = json.loads(argv[argv.index("--compilation-config") + 1])
        assert cc["cudagraph_mode"] == cfg.cudagraph_mode     # the configuration's own
        assert (cc.get("inductor_compile_config") == INDUCTOR_CONFIG) is fixed, mode
    fresh = make_adapter("vllm", isolation="fresh", work_dir=tmp_path, poison="auto")
    argv, env = fresh.command(cfg, 8000, Slot("gpu0", "0"))
    assert "engine.vllm.poison.PoisonWorker" in argv and env["VLLM_SERVER_DEV_MODE"] == "1"
    other = make_adapter("vllm", work_dir=tmp_path, poison="auto",
                         extra_args=("--worker-extension-cls=my.Ext",))
    assert other.poison is False     # auto: the user's extension stays, no fill


def test_the_lab_fill_proves_each_region_and_sleep_gives_back_the_boot_contents():
    tok = LabTokenizer(LAB_MODEL_DIR)

    class Runner:
        rows: dict = {}
        free_rows = [0, 1, 2, 3]

    pool = BlockPool(8, 16, True, num_rows=4, num_spec_tokens=3)
    stale = StaleMemory(pool, Runner(), tok)
    boot = (pool.slot_last.copy(), pool.slot_drafts.copy())
    assert stale.residue_lab_arm() == {"builders": {"tensors": 1, "bytes": 32}}
    Runner.free_rows[:] = [2, 0, 3, 1]                  # a served request changed the order
    out = stale.residue_lab_poison("state,kv,builders", "A")
    assert out["ok"] and set(out["regions"]) == {"state", "kv", "builders"}
    for r in out["regions"].values():
        assert r["checksum"] == r["expected"] and r["ok"]
    assert Runner.free_rows == [0, 1, 2, 3] and (pool.kv_pos == -1).all()
    assert len({int(x) for x in pool.slot_last}) == 1     # every row the same tile
    again = StaleMemory(BlockPool(8, 16, True, num_rows=4, num_spec_tokens=3), Runner(), tok)
    again.residue_lab_arm()
    assert again.residue_lab_poison("state", "A")["regions"]["state"] == out["regions"]["state"]
    pool.discard()                                      # sleep: this server's boot contents
    assert (pool.slot_last == boot[0]).all() and (pool.slot_drafts == boot[1]).all()
    with pytest.raises(ValueError, match="unknown poison region"):
        stale.residue_lab_poison("nowhere", "A")


def _cells(recs: list[dict]) -> dict:
    return {(r["document_seed"], r["residue"], r["phase"]): r for r in recs}


@pytest.mark.slow
def test_fresh_lab_servers_disagree_at_the_rule_cell_without_the_mode_and_agree_with_it(cli):
    runs = defaultdict(list)
    for mode, n in (("off", 3), ("on", 2)):
        for i in range(n):
            out = f"{mode}{i}"
            cli.sweep(*BREAKS_COLD, "--poison", mode, lab_model=True, out=out, reports=None,
                      rc=1)
            runs[mode].append(_cells(cli.records(out)))
    rule = [(doc, 5, "cold") for doc in (0, 1)]
    # without the mode: the cold answer at the rule's cell is each process's stale memory
    for run in runs["off"]:
        assert all(run[c]["verdict"] == "broken" for c in rule)
    assert any(len({run[c]["sha1"] for run in runs["off"]}) > 1 for c in rule)
    # with it: one verdict and one sha1 per cell on every server, the rule's cell included
    first = runs["on"][0]
    for run in runs["on"][1:]:
        assert {c: (r["verdict"], r["sha1"]) for c, r in run.items()} == {
            c: (r["verdict"], r["sha1"]) for c, r in first.items()}
    assert all(first[c]["verdict"] == "broken" for c in rule)
    # and every ok answer is the same with the mode on and off
    for run in runs["off"]:
        assert {c: r["verdict"] for c, r in run.items()} == {
            c: r["verdict"] for c, r in first.items()}
        for c, r in run.items():
            if r["verdict"] == "ok":
                assert r["sha1"] == first[c]["sha1"], c
    assert all(f["ok"] for r in first.values() for f in r["poison"]["fills"])


# -- auto: every non-ok cell on two fresh servers or more (issue 32) -----------------------

def _rec(phase: str, verdict: str, sha: str, log: str):
    from harness.records.phase_record import PhaseRecord
    return PhaseRecord.from_dict({"phase": phase, "verdict": verdict, "sha1": sha,
                                  "server_boot": {"log": log}})


def test_a_non_ok_fresh_point_of_auto_gets_a_second_server_and_a_third_where_they_differ():
    from types import SimpleNamespace
    from harness.run.auto import more_servers, settle
    from harness.report.auto import stability
    point = SimpleNamespace(isolation="fresh", confirms="not ok on restore")
    ok = [_rec("cold", "ok", "a", "s1"), _rec("self-hit", "ok", "a", "s1")]
    bad = [_rec("cold", "ok", "a", "s1"), _rec("self-hit", "broken", "b", "s1")]
    assert not more_servers(point, [ok])                      # ok everywhere: one server
    assert more_servers(point, [bad])                         # not ok: a second
    assert not more_servers(SimpleNamespace(isolation="fresh", confirms=None), [bad])
    same = [r.replaced(server_boot={"log": "s2"}) for r in bad]
    assert not more_servers(point, [bad, same])               # reproduced: done
    recs = settle([bad, same])
    assert [r.confirmed_on for r in recs][1] == [
        {"verdict": "broken", "sha1": "b", "log": "s1"}, {"verdict": "broken", "sha1": "b", "log": "s2"}]
    assert stability(recs[1].confirmed_on) == "reproduced on 2 servers"
    # the second server answers ok: a third; the cell is the worst server's, never ok
    assert more_servers(point, [bad, ok])
    recs = settle([ok, bad, ok])
    assert recs[1].verdict == "broken" and recs[1].server_boot["log"] == "s1"
    assert stability(recs[1].confirmed_on) == "unstable: ok on 2 of 3"
    assert not more_servers(point, [bad, ok, ok])             # at most three
    other = [bad[0], _rec("self-hit", "broken", "c", "s3")]
    assert stability(settle([bad, other])[1].confirmed_on) == \
        "unstable: 2 servers, not ok on each, 2 different answers"


@pytest.mark.slow
def test_auto_says_per_non_ok_cell_whether_its_fresh_servers_agreed(cli):
    """The rule's cold-breaking cell under auto: with the mode its fresh servers give one
    answer ("reproduced on 2 servers"); without it each lab process its own, and a third
    server runs where two differed (that they differ at all: the test above)."""
    args = [a for a in BREAKS_COLD if a != "fresh"]
    args[args.index("--isolation") + 1:args.index("--isolation") + 1] = ["auto"]
    for mode in ("on", "off"):
        cli.sweep(*args, "--auto-sample", "0", "--poison", mode, lab_model=True, out=mode,
                  reports=f"rep-{mode}", rc=1)
        fresh = [r for r in cli.records(mode) if r["isolation"] == "fresh"
                 and r["verdict"] != "ok"]
        assert fresh and all(len(r["confirmed_on"]) >= 2 for r in fresh), mode
        report = " ".join(cli.report(f"rep-{mode}").split())
        cold = [r for r in fresh if r["phase"] == "cold"]
        if mode == "on":
            assert all(len({s["sha1"] for s in r["confirmed_on"]}) == 1 for r in fresh)
            assert "residue 5 cold (document 0): reproduced on 2 servers" in report
        else:   # each process's own bytes: a third server exactly where two differed
            for r in cold:
                first_two = {(s["verdict"], s["sha1"]) for s in r["confirmed_on"][:2]}
                assert len(r["confirmed_on"]) == (3 if len(first_two) > 1 else 2)
            assert "Fresh servers per non-ok cell: " in report
    assert all(r["verdict"] != "ok" for r in cli.records("off") if r.get("confirmed_on"))


def test_the_reports_poison_row_says_whether_kernel_choices_were_fixed():
    """A vLLM run's provenance names the switches and how far a broken answer's bytes hold,
    or says the kernels were not fixed and why (an older vLLM: restore then sleeps)."""
    from harness.report.restore import poison_summary
    from harness.records.phase_record import PhaseRecord

    def rec(kernels):
        fill = {"at": "boot", "ok": True, "s": 0.1}
        return PhaseRecord.from_dict({"run_id": "r", "config_id": "c", "residue": 1,
                                      "phase": "cold", "poison": {
                                          "mode": "on", "regions": "state,kv,builders",
                                          "pattern": "A", "fills": [fill], "kernels": kernels},
                                      "server_boot": {"log": "s1.log"}})
    fixed = poison_summary([rec({"fixed": True, "env": KERNEL_ENV, "cache": "/c"})])
    assert "every fill proven" in fixed and "kernel choices fixed (" in fixed
    assert "VLLM\\_TRITON\\_FORCE\\_FIRST\\_CONFIG" in fixed
    # issue 48: the bytes hold for servers sharing a compile, named by its fingerprint
    assert "no compile fingerprint recorded" in fixed
    combo = poison_summary([rec({"fixed": True, "env": KERNEL_ENV, "inductor": INDUCTOR_CONFIG,
                                 "cache": "/c"})])
    assert "combo\\_kernels=False" in combo and "every compile" not in combo
    why = "this vLLM has no VLLM_TRITON_FORCE_FIRST_CONFIG"
    unfixed = poison_summary([rec({"fixed": False, "why": why})])
    assert "kernel choices not fixed: this vLLM has no VLLM\\_TRITON\\_FORCE\\_FIRST\\_CONFIG" in unfixed
    assert "kernel choices" not in poison_summary([rec(None)])
