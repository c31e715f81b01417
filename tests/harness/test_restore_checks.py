"""Issue 33 item 7, "Restore's proof kept and complete": every check of a restore keeps its
value in the record (``restore.checks``); a check that could not run (the metrics absent, a
scrape that failed, only the worker's freed line in the log) is named there and in the
report's restore row, which says "each proven" only when every check ran and held.

Real lab servers on 127.0.0.1 (tests/lab/labserver.py, and the sweep through the ``cli``
fixture); the log-line readers on vLLM's own spellings (0.27.1's ``cumem.py`` and
``gpu_worker.py``, the installed release)."""
from __future__ import annotations

import asyncio

import pytest

from harness.serve.client import EngineClient
from harness.report.restore import restore_summary
from harness.serve.restore import discarded_gib, freed_lines, restore_server, sleep_lines
from harness.records.phase_record import PhaseRecord

pytestmark = pytest.mark.usefixtures("no_leftovers")

SLEEP_CHECKS = ["is_sleeping", "sleep_gauge", "discard", "is_awake", "wake_gauge",
                "pool_empty"]
LAB = ["--enable-prompt-tokens-details", "--enable-sleep-mode"]


def _restore(args: list[str], log_path) -> dict:
    from tests.lab.labserver import lab_server
    with lab_server(args, log_path) as srv:
        async def go():
            async with EngineClient(srv.url) as client:
                return await restore_server(client, srv.log_path)
        return asyncio.run(go())


def test_every_check_keeps_its_value_in_the_record(tmp_path):
    """Before: the gauges were read and dropped (only ``metrics`` after the wake and
    ``discarded_gib`` were kept), so the record could not show what proved the restore."""
    proof = _restore(LAB, tmp_path / "lab.log")
    checks = proof["checks"]
    assert list(checks) == SLEEP_CHECKS and all(c["ok"] for c in checks.values()), checks
    assert checks["is_sleeping"]["value"] is True and checks["is_awake"]["value"] is False
    assert checks["sleep_gauge"]["value"] == {"awake": 0, "weights_offloaded": 1,
                                              "discard_all": 0}
    assert checks["wake_gauge"]["value"] == {"awake": 1, "weights_offloaded": 0,
                                             "discard_all": 0}
    gone = checks["discard"]["value"]
    assert gone["gone"] > 0 and gone["backup"] == 0 and gone["total"] == gone["gone"]
    assert proof["discarded_gib"] == gone["gone"]
    assert checks["pool_empty"]["value"] == proof["metrics"]
    assert proof["metrics"]["running"] == 0 and proof["metrics"]["kv_cache_usage"] == 0


def test_without_metrics_the_gauge_and_pool_checks_are_named_not_run(tmp_path):
    """A server started with --disable-log-stats serves no vllm:* metric: the gauge and
    pool checks were skipped in silence before; now each is named, the rest still held."""
    checks = _restore([*LAB, "--disable-log-stats"], tmp_path / "lab.log")["checks"]
    assert list(checks) == SLEEP_CHECKS
    for name in ("sleep_gauge", "wake_gauge"):
        assert checks[name] == {"not_run": "metrics absent: /metrics has no "
                                           "vllm:engine_sleep_state"}
    assert checks["pool_empty"]["not_run"].startswith("metrics absent: /metrics has no "
                                                      "vllm:num_requests_running")
    assert all(checks[n]["ok"] for n in ("is_sleeping", "discard", "is_awake"))


def test_the_workers_freed_line_is_not_taken_for_a_discard(tmp_path):
    """Where the allocator's line is not in the log, the worker's 'Sleep mode freed X GiB'
    was read as X GiB discarded; at level 1 X counts the weights offloaded to CPU too. The
    check is named not run and X kept as freed, not discarded."""
    proof = _restore([*LAB, "--quiet-allocator"], tmp_path / "lab.log")
    discard = proof["checks"]["discard"]
    assert discard["not_run"].startswith("no allocator line: the worker's 'Sleep mode "
                                         "freed' counts the weights offloaded to CPU")
    assert discard["value"]["freed"] > 0 and proof["discarded_gib"] is None
    assert all(proof["checks"][n]["ok"] for n in SLEEP_CHECKS if n != "discard")


def test_a_worker_line_of_nothing_freed_still_fails_the_restore(tmp_path):
    """The worker's line cannot prove a discard, but 0 GiB freed disproves one: a server
    without --enable-sleep-mode is refused as by the allocator's 0.00 GiB line."""
    from harness.serve.restore import RestoreFailed
    with pytest.raises(RestoreFailed, match="freed 0.00 GiB.*--enable-sleep-mode") as e:
        _restore(["--enable-prompt-tokens-details", "--quiet-allocator"], tmp_path / "l.log")
    assert e.value.checks["discard"] == {"value": {"freed": 0.0}, "ok": False}
    assert e.value.checks["is_sleeping"]["ok"]


def test_a_scrape_that_fails_is_named_with_its_error(tmp_path):
    """/metrics answering 500 (a server whose stat logger broke): before, pool_state gave
    {} and both gauge checks and the pool check were skipped in silence. A server behind
    an ``httpx.MockTransport`` whose /sleep writes vLLM's allocator line to its log."""
    import httpx
    log = tmp_path / "vllm.log"
    log.write_text("")
    state = {"asleep": False}

    def reply(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/sleep":
            state["asleep"] = True
            with log.open("a") as f:
                f.write("CuMemAllocator: sleep freed 3.00 GiB memory in total, of which 1.00 "
                        "GiB is backed up in CPU and the rest 2.00 GiB is discarded directly.\n")
        elif path == "/wake_up":
            state["asleep"] = False
        elif path == "/is_sleeping":
            return httpx.Response(200, json={"is_sleeping": state["asleep"]})
        elif path == "/metrics":
            return httpx.Response(500, text="stat logger failed")
        return httpx.Response(200)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(reply)) as http:
            client = EngineClient("http://127.0.0.1:9", http=http)
            return await restore_server(client, log)
    proof = asyncio.run(go())
    checks = proof["checks"]
    for name in ("sleep_gauge", "wake_gauge", "pool_empty"):
        assert checks[name]["not_run"].startswith("scrape failed: "), checks[name]
        assert "500" in checks[name]["not_run"], checks[name]
    assert checks["discard"] == {"value": {"total": 3.0, "backup": 1.0, "gone": 2.0},
                                 "ok": True}
    assert proof["discarded_gib"] == 2.0


def test_vllms_sleep_lines_tell_the_offloaded_weights_from_the_discard():
    """vLLM 0.27.1, sleep level 1 (a 12 GiB model, 2.5 GiB of KV): the allocator's line
    splits the two; the worker's line is their sum, which the fallback counted as
    discarded."""
    allocator = ("(EngineCore_DP0 pid=7) INFO 12-02 10:00:01 [cumem.py:272] CuMemAllocator: "
                 "sleep freed 14.52 GiB memory in total, of which 12.02 GiB is backed up in "
                 "CPU and the rest 2.50 GiB is discarded directly.\n")
    worker = ("(EngineCore_DP0 pid=7) INFO 12-02 10:00:01 [gpu_worker.py:221] Sleep mode "
              "freed 14.53 GiB memory, 1.20 GiB memory is still in use.\n")
    assert sleep_lines(allocator + worker) == [{"total": 14.52, "backup": 12.02,
                                                "gone": 2.50}]
    assert discarded_gib(allocator + worker) == [2.50]
    assert discarded_gib(worker) == [] and freed_lines(worker) == [14.53]


def _rec(residue: int, restore: dict) -> PhaseRecord:
    return PhaseRecord.from_dict({"run_id": "r", "config_id": "c", "residue": residue,
                                  "phase": "cold", "isolation": "restore",
                                  "restore": restore})


def test_the_restore_row_says_proven_only_for_checks_that_ran():
    ok = {n: {"value": 1, "ok": True} for n in SLEEP_CHECKS}
    means = {"means": "sleep-level-1+wake+reset", "s": 0.02}
    row = restore_summary([_rec(1, {**means, "checks": ok}), _rec(2, {**means, "checks": ok})])
    assert row.startswith("sleep-level-1+wake+reset: 2 points restored, each proven: asleep, "
                          "sleep gauge, KV discarded, awake, wake gauge, pool empty (median")
    absent = {**ok, "sleep_gauge": {"not_run": "metrics absent"},
              "wake_gauge": {"not_run": "metrics absent"}}
    row = restore_summary([_rec(1, {**means, "checks": absent}),
                           _rec(2, {**means, "checks": ok})])
    assert "each proven" not in row
    assert ("2 points restored, proven: asleep, KV discarded, awake, pool empty; sleep "
            "gauge, wake gauge not run on 1 point (metrics absent) (median") in row
    # records written before restore.checks read as they did
    assert "2 points restored, each proven (median" in restore_summary(
        [_rec(1, means), _rec(2, means)])


def test_a_sweep_on_a_server_without_metrics_names_the_checks_in_record_and_report(cli):
    """Before: the report's restore row said "each proven" though the sleep-state gauge
    and the pool were never read (--disable-log-stats: /metrics has no vllm:* metric)."""
    cli.sweep("--spec", "ngram", "--draft-tokens", "3", "--residues", "3-5", "--slots", "1",
              "--isolation", "restore", "--poison", "off", "--engine-arg=--disable-log-stats",
              lab_model=True, rc=0)
    restored = [r["restore"] for r in cli.records() if r["phase"] == "cold"
                and r["restore"]["means"] != "boot"]
    assert len(restored) == 2, [r["restore"] for r in cli.records()]
    for proof in restored:
        assert proof["checks"]["sleep_gauge"]["not_run"].startswith("metrics absent")
        assert proof["checks"]["pool_empty"]["not_run"].startswith("metrics absent")
        assert proof["checks"]["discard"]["ok"] and proof["discarded_gib"] > 0
    row = next(ln for ln in cli.report().splitlines() if ln.startswith("| restore "))
    assert "each proven" not in row, row
    assert "2 points restored, proven: asleep, KV discarded, awake; sleep gauge, wake gauge " \
           "not run on 2 points (metrics absent: /metrics has no vllm:engine\\_sleep\\_state)" \
           in row, row
    assert "pool empty not run on 2 points (metrics absent" in row, row
