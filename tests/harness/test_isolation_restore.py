"""``--isolation restore`` end to end through the real CLI on the lab engine, whose reused
servers carry state a prefix-cache reset leaves behind (docs/lab-engine.md, "Reset is not
fresh; sleep mode"): a reset sweep's answers at the rule's cell depend on what the server
served before, a restore sweep's equal fresh servers' byte for byte in every cell.

The configuration breaks cold, as vLLM 0.26.0's hybrid does (``--mamba-cache-mode align``):
ngram k = 4, FULL_AND_PIECEWISE, no fix; the rule's residue is 5."""
from __future__ import annotations

import asyncio
import re

import pytest

from harness.options import options_from_argv

from engine.vllm.effective import parse_effective_config
from engine.presets import resolve
from harness.serve.client import EngineClient
from harness.serve.engines import VllmAdapter, make_adapter, vllm_serves_sleep
from harness.errors import UsageError
from harness.serve.restore import RestoreFailed, restore_server
from harness.server_pool import Slot
from tests._vllm import require_vllm
from tests.conftest import fake_cmd

pytestmark = pytest.mark.usefixtures("no_leftovers")

BREAKS_COLD = ("--spec", "ngram", "--draft-tokens", "4", "--cudagraph", "FULL_AND_PIECEWISE",
               "--patches", "none", "--engine-arg=--mamba-cache-mode=align",
               "--residues", "2-7", "--context", "1200", "--slots", "1")


def cells(recs):
    return {(r["residue"], r["phase"]): r for r in recs}


def test_restore_equals_fresh_where_reset_differs(cli):
    """--poison on (auto, the lab can): restore is the reset + the fill, no sleep; every cell
    equals the fresh servers' byte for byte, the rule's broken cell included."""
    runs = {}
    for iso in ("fresh", "reset", "restore"):
        cli.sweep(*BREAKS_COLD, "--isolation", iso, lab_model=True, out=iso,
                  reports=f"reports-{iso}", rc=1)
        runs[iso] = (None, cli.records(iso), cli.manifest(iso), cli.report(f"reports-{iso}"))
    fresh, reset, restore = (cells(runs[i][1]) for i in ("fresh", "reset", "restore"))
    assert set(fresh) == set(reset) == set(restore)
    for key, f in fresh.items():
        assert (restore[key]["verdict"], restore[key]["answer"]) == (f["verdict"], f["answer"])
        assert restore[key]["isolation"] == "restore"
    # The reset sweep is history-dependent: at the rule's cell it answered differently
    # from the fresh servers (so this test could fail), while restore did not.
    differs = {key for key in fresh if reset[key]["answer"] != fresh[key]["answer"]}
    assert (5, "cold") in differs and all(key[0] == 5 for key in differs)
    assert fresh[(5, "cold")]["verdict"] == "broken"
    # every point after the server's first was restored by the fill, each proven, then
    # cold cached_tokens 0; the record keeps the boot fill and the point's own
    cold = [r for r in runs["restore"][1] if r["phase"] == "cold"]
    proofs = [r["restore"] for r in cold]
    assert proofs[0]["means"] == "boot" and len(proofs) == 6
    for p, rec in zip(proofs[1:], cold[1:]):
        assert p["means"] == "reset+poison-fill" and p["proven"] is True
        assert set(p["steps"]) == {"reset", "fill"}
        # issue 51: only the blocks and rows the previous point was given were refilled
        assert p["restored"]["means"] == "dirty" and p["restored"]["blocks"] > 0
        assert p["metrics"]["running"] == 0 and p["metrics"]["kv_cache_usage"] == 0
        assert [f["at"] for f in rec["poison"]["fills"]] == ["boot", "restore"]
        assert all(f["ok"] for f in rec["poison"]["fills"])
        assert rec["cached_tokens"] == 0
    assert runs["restore"][1][0]["config"]["enable_sleep_mode"] is False   # no weights moved
    report = runs["restore"][3]
    assert "| restore " in report and "5 points restored, each proven" in report
    assert "dirty (the blocks the point was given) on 5 points, median " in report
    assert re.search(r"\| poison +\| on: state,kv,builders filled with pattern A after boot "
                     r"\(1 server\) and at 5 restores; every fill proven", report)
    manifest = runs["restore"][2]
    assert manifest["timing"]["restored_points"] == 5 and manifest["timing"]["median_restore_s"] > 0


def test_without_the_fill_restore_is_the_sleep_cycle(cli):
    """--poison off: restore falls back to sleep level 1 + wake + reset; verdicts equal the
    fresh servers' in every cell and ok answers byte for byte (a broken cell's bytes are
    each lab process's own stale memory: engine/lab/poison.py)."""
    runs = {}
    for iso in ("fresh", "restore"):
        cli.sweep(*BREAKS_COLD, "--isolation", iso, "--poison", "off", lab_model=True, out=iso,
                  reports=f"reports-{iso}", rc=1)
        runs[iso] = (cli.records(iso), cli.report(f"reports-{iso}"))
    fresh, restore = cells(runs["fresh"][0]), cells(runs["restore"][0])
    assert set(fresh) == set(restore)
    for key, f in fresh.items():
        assert restore[key]["verdict"] == f["verdict"], key
        if f["verdict"] == "ok":
            assert restore[key]["answer"] == f["answer"], key
    assert fresh[(5, "cold")]["verdict"] == "broken"
    cold = [r for r in runs["restore"][0] if r["phase"] == "cold"]
    for p in [r["restore"] for r in cold][1:]:
        assert p["means"] == "sleep-level-1+wake+reset" and p["discarded_gib"] > 0
        assert set(p["steps"]) == {"sleep", "is_sleeping", "wake_up", "is_awake", "reset"}
    assert all(r["poison"] == {"mode": "off"} for r in runs["restore"][0])
    assert runs["restore"][0][0]["config"]["enable_sleep_mode"] is True
    assert "5 points restored, each proven" in runs["restore"][1]
    assert re.search(r"\| poison +\| off \(--poison off\) +\|", runs["restore"][1])


def test_a_failed_restore_replaces_the_server_and_the_point_runs_on_the_new_one(cli):
    """The H200's four 'timeout' restore points (reports/h200/README.md, issue 24): vLLM's
    sleep failed ('Memory usage increased after sleeping', 500) after pausing the scheduler,
    and the harness sent the point's request to that paused server anyway, 120 s each. The lab
    fails each server's 2nd sleep the same way (--fail-sleep-at 2): no request goes to that
    server; it is stopped and the point runs on a just-booted one, whose record names the
    failed restore. Every point is measured, none lost to an invalid cell."""
    proc = cli.sweep(*BREAKS_COLD, "--engine-arg=--fail-sleep-at=2", "--isolation", "restore",
                     "--poison", "off", lab_model=True, rc=1, timeout=120)
    recs = cli.records()
    assert len(recs) == 12 and not [r for r in recs if r["verdict"] == "invalid"], \
        proc.stderr[-2000:]
    replaced = [r for r in recs if r["restore"].get("replaced")]
    assert replaced, proc.stderr[-2000:]
    for r in replaced:
        assert r["restore"]["means"] == "boot"
        assert r["restore"]["replaced"].startswith("restore failed on the reused server")
        assert "Memory usage increased after sleeping" in r["restore"]["replaced"]
    # 6 points on one slot: boot, restored, failed -> a new server for that point: boot,
    # restored, failed -> boot, restored (each server fails its 2nd sleep); before, the
    # failed points were recorded invalid with nothing sent
    means = [(r["restore"]["means"], bool(r["restore"].get("replaced")))
             for r in recs if r["phase"] == "cold"]
    assert sorted(means) == sorted([("boot", False), ("sleep-level-1+wake+reset", False),
                                    ("boot", True), ("sleep-level-1+wake+reset", False),
                                    ("boot", True), ("sleep-level-1+wake+reset", False)]), means
    # every point is judged as on fresh servers: residue 5 breaks cold, the rest ok
    verdicts = {(r["residue"], r["phase"]): r["verdict"] for r in recs}
    assert verdicts[(5, "cold")] == "broken"
    assert all(v == "ok" for (res, _), v in verdicts.items() if res != 5)
    assert "2 restores failed (the server was replaced, the point ran on the new one" in cli.report()


def test_cmd_engine_refuses_restore_naming_fresh(tmp_path, tok_dir, cli):
    proc = cli.sweep("--engine", "cmd", "--server-cmd", fake_cmd(tok_dir), "--isolation",
                     "restore", rc=2, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--isolation fresh" in lines[0] and "restore" in lines[0]
    assert not list((tmp_path / "results").glob("*.jsonl"))


def test_a_server_without_sleep_mode_fails_the_restore(tmp_path):
    """Without --enable-sleep-mode a sleep discards nothing (the allocator line says 0.00
    GiB): the restore is refused, never taken as done."""
    from tests.lab.labserver import lab_server
    with lab_server(["--enable-prompt-tokens-details"], tmp_path / "plain.log") as srv:
        async def go():
            async with EngineClient(srv.url) as client:
                await restore_server(client, srv.log_path)
        with pytest.raises(RestoreFailed, match="0.00 GiB.*--enable-sleep-mode"):
            asyncio.run(go())


def test_the_installed_vllm_serves_sleep_mode():
    """Read from the installed vLLM's source (0.27.1 in the venv); skipped where no vLLM
    is installed (the README's `pip install -e '.[test]'` brings none)."""
    require_vllm(module_level=False)
    assert vllm_serves_sleep() is True


def test_vllm_adapter_turns_sleep_mode_and_dev_mode_on(monkeypatch, tmp_path):
    """The adapter's commands, whether or not a vLLM is installed here: the sleep-mode
    check is answered yes (what the pinned release serves, checked above)."""
    monkeypatch.setattr("harness.serve.vllm_adapter.vllm_serves_sleep", lambda: True)
    cfg = resolve("ngram", "huge", engine="vllm", model="/m", patches="none")
    for iso, sleep in (("restore", True), ("auto", False), ("reset", False), ("fresh", False)):
        adapter = make_adapter("vllm", isolation=iso, work_dir=tmp_path)
        argv, env = adapter.command(cfg, 8000, Slot("gpu0", "0"))
        assert ("--enable-sleep-mode" in argv) is sleep, iso
        assert (env.get("VLLM_SERVER_DEV_MODE") == "1") is (iso != "fresh"), iso
        # a point's server: sleep mode for a restore point only (auto's restore pass),
        # plain for a fresh one (auto's confirmations): a sleep-mode server is not plain
        for point_iso, want in (("restore", True), ("fresh", False), ("reset", False)):
            argv, _ = adapter.for_isolation(point_iso).command(cfg, 8000, Slot("gpu0", "0"))
            assert ("--enable-sleep-mode" in argv) is want, (iso, point_iso)
    log = ("(APIServer pid=1) INFO 12-01 10:00:00 [api_utils.py:273] non-default args: "
           "{'model': '/m', 'enable_sleep_mode': True, 'max_model_len': 245760}\n")
    assert parse_effective_config(log)["enable_sleep_mode"] is True
    assert parse_effective_config(log.replace("'enable_sleep_mode': True, ", ""))[
        "enable_sleep_mode"] is False


def test_a_vllm_without_sleep_mode_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr("harness.serve.vllm_adapter.vllm_serves_sleep", lambda: False)
    with pytest.raises(UsageError, match="no sleep-mode endpoints.*--isolation fresh"):
        # an engine's refusal is a row of settings/flag_checks.RULES (issue 47)
        options_from_argv(["--engine", "vllm", "--model", "/m", "--isolation", "restore",
                           "--out", str(tmp_path / "o")])
    # auto falls back to reset there, and starts no server in sleep mode
    adapter = make_adapter("vllm", isolation="auto", work_dir=tmp_path)
    cfg = resolve("ngram", "huge", engine="vllm", model="/m", patches="none")
    assert isinstance(adapter, VllmAdapter)
    argv, _ = adapter.for_isolation("restore").command(cfg, 8000, Slot("gpu0", "0"))
    assert "--enable-sleep-mode" not in argv


def test_poison_keeps_vllms_sleep_cycle_and_refills_only_the_lab(monkeypatch, tmp_path):
    """A fill stands for a boot only where it covers what a corrupted replay reads: the lab
    by construction, and vLLM only once its kernel choices are fixed too
    (reports/h200/determinism/). So under --poison a restore point of a vLLM that cannot
    fix them still sleeps (and is filled again after the wake), a lab one does not."""
    monkeypatch.setattr("harness.serve.vllm_adapter.vllm_serves_sleep", lambda: True)
    monkeypatch.setattr("engine.vllm.determinism.vllm_fixes_kernels", lambda: False)
    cfg = resolve("ngram", "huge", engine="vllm", model="/m", patches="none")
    vllm = make_adapter("vllm", isolation="restore", work_dir=tmp_path, poison="auto")
    argv, env = vllm.for_isolation("restore").command(cfg, 8000, Slot("gpu0", "0"))
    assert vllm.poison and "--enable-sleep-mode" in argv
    assert "engine.vllm.poison.PoisonWorker" in argv and env["VLLM_SERVER_DEV_MODE"] == "1"
    lab = make_adapter("lab", isolation="restore", work_dir=tmp_path, poison="auto")
    assert lab.poison and lab.fill_restores and not lab.for_isolation("restore").sleep_mode
    assert make_adapter("lab", isolation="restore", work_dir=tmp_path,
                        poison="off").for_isolation("restore").sleep_mode


def test_a_poisoned_server_that_cannot_restore_by_fill_sleeps_then_is_filled_again(monkeypatch):
    """The dispatch of a restore point: the fill as the means only where the adapter said
    a fill stands for a boot (``ServerFacts.fill_restores``); else the sleep cycle, then the fill again
    (a wake maps new memory) kept in ``restore.fill``; unpoisoned: the sleep cycle alone."""
    import asyncio
    from types import SimpleNamespace

    from harness.serve import isolation, poison, restore
    from harness.serve.facts import ServerFacts
    calls = []

    async def sleep_cycle(client, log_path):
        calls.append("sleep")
        return {"means": "sleep-level-1+wake+reset"}

    async def by_fill(client, rec):
        calls.append("fill-means")
        return {"means": "reset+poison-fill"}

    async def refill(client, rec, whole=False):
        # after a sleep cycle the pool was discarded: every storage, never the dirty set
        calls.append("refill" if whole else "refill-dirty")
        return {"at": "restore", "ok": True}
    monkeypatch.setattr(restore, "restore_server", sleep_cycle)
    monkeypatch.setattr(restore, "restore_by_fill", by_fill)
    monkeypatch.setattr(poison, "refill", refill)
    server = SimpleNamespace(log_path=None)
    cases = ((ServerFacts(poison={"mode": "on"}, fill_restores=True), ["fill-means"]),
             (ServerFacts(poison={"mode": "on"}, fill_restores=False), ["sleep", "refill"]),
             (ServerFacts(poison={"mode": "off"}, fill_restores=False), ["sleep"]))
    for info, want in cases:
        calls.clear()
        asyncio.run(isolation._restore(None, server, info))
        assert calls == want, info
    assert info.restore == {"means": "sleep-level-1+wake+reset"}
