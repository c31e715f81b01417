"""Issue 33 item 3, the judging logic: what the two /metrics scrapes around a phase say
ran beside it (``harness/run/traffic.py``), and what a matching answer is worth on a
server the sweep does not own (``--url``) when it was not shown to run alone:
``not-lone``, never ``ok``, never clean for the rule, never exit 0.

The expositions are made by ``prometheus_client`` under vLLM's metric names and labels
(``vllm/v1/metrics/loggers.py``: gauges ``vllm:num_requests_running`` / ``_waiting``
with ``model_name`` and ``engine``, counter ``vllm:request_success`` with
``finished_reason``), so the parser reads what vLLM writes, ``_created`` samples
included. The end-to-end scenario (a lab server and six other clients) is
``tests/harness/test_live_traffic.py``.
"""
from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from harness.serve.client import EngineClient, MetricsScrape, scrape_from_text
from harness.serve.facts import ServerFacts
from harness.publish.gate import gate_exit_code
from harness.report import render_markdown
from harness.run.point import PointRunner
from harness.run.traffic import not_lone_reason, traffic_facts
from harness.server_pool import Slot
from tests.harness.test_point_runner import FakeServer, answer, make_point


def exposition(running: dict[str, int], waiting: int = 0, finished: int = 0) -> str:
    """/metrics as vLLM writes it: ``running`` per engine index, ``finished`` requests
    split over two finished reasons."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    g_run = Gauge("vllm:num_requests_running", "running", labels, registry=reg)
    g_wait = Gauge("vllm:num_requests_waiting", "waiting", labels, registry=reg)
    done = Counter("vllm:request_success", "finished", labels + ["finished_reason"],
                   registry=reg)
    for engine, n in running.items():
        g_run.labels("m", engine).set(n)
        g_wait.labels("m", engine).set(waiting if engine == "0" else 0)
    done.labels("m", "0", "stop").inc(finished - finished // 2)
    done.labels("m", "0", "length").inc(finished // 2)
    return generate_latest(reg).decode()


def scrape(running: int, finished: int, waiting: int = 0) -> MetricsScrape:
    return scrape_from_text(exposition({"0": running}, waiting, finished))


def test_a_scrape_reads_vllms_gauges_and_its_finished_counter():
    s = scrape_from_text(exposition({"0": 2, "1": 1}, waiting=4, finished=7))
    # summed over engines and finished reasons; the _created timestamps are not counted
    assert (s.running, s.waiting, s.finished, s.error) == (3, 4, 7, None)
    assert s.spec == (0.0, 0.0)          # no spec-decode counters: no drafts


def test_a_page_that_is_not_an_exposition_is_a_scrape_error_not_a_crash():
    s = scrape_from_text("<html><body>502 Bad Gateway</body></html>")
    assert s.error and "not a Prometheus exposition" in s.error
    assert s.running is None and s.spec is None


@pytest.mark.parametrize("before, after, alone, others, finished", [
    # the measured request is in neither gauge and once in the counter: alone
    (scrape(0, 10), scrape(0, 11), True, 0, 0),
    # two others running across the whole phase
    (scrape(2, 10), scrape(2, 11), False, 2, 0),
    # three others came and went between the scrapes: the gauges alone would miss them
    (scrape(0, 10), scrape(0, 14), False, 3, 3),
    # one waiting when the phase ended
    (scrape(0, 10), scrape(0, 11, waiting=1), False, 1, 0),
])
def test_what_the_scrapes_say_ran_beside_the_phase(before, after, alone, others, finished):
    t = traffic_facts(before, after)
    assert (t["alone"], t["others"], t["finished_between"]) == (alone, others, finished)
    assert "missing" not in t
    assert (not_lone_reason(t) is None) is alone


def test_a_server_that_does_not_say_is_not_shown_alone():
    gone = MetricsScrape(error="/metrics answered HTTP 404")
    t = traffic_facts(gone, gone)
    assert t["alone"] is None and t["others"] is None and t["missing"] == gone.error
    assert "unknown (/metrics answered HTTP 404)" in not_lone_reason(t)
    # gauges without the finished counter: a request that came and went is unseen
    no_counter = MetricsScrape(spec=(0.0, 0.0), running=0, waiting=0)
    t = traffic_facts(no_counter, no_counter)
    assert t["alone"] is None and "vllm:request_success_total" in t["missing"]
    # ... but others seen are seen
    t = traffic_facts(dataclasses.replace(no_counter, running=2), no_counter)
    assert t["alone"] is False and t["others"] == 2


def run_phases(tmp_path, tok_dir, isolation: str, metrics, text=None):
    """One point's phases through ``PointRunner`` on a server answering ``metrics()`` at
    each /metrics scrape, each chat with ``text`` (the passage by default)."""
    opts, adapter, point = make_point(tmp_path, tok_dir)
    opts = opts.replace(isolation=isolation)
    hit = point.plan.target_len - point.residue

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/tokenize":
            return httpx.Response(200, json={"count": point.plan.target_len})
        if path == "/metrics":
            return metrics()
        if path == "/v1/chat/completions":
            handler.chats += 1
            return answer(point, point.plan.expected if text is None else text,
                          0 if handler.chats == 1 else hit)
        return httpx.Response(404)
    handler.chats = 0

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            runner = PointRunner(opts, adapter, run_id="run-t", logs_dir=tmp_path,
                                 http=http, version="test")
            server = FakeServer([], {}, 1, tmp_path / "server.log", None)
            server.start()
            client = EngineClient(server.base_url, http=http)
            records, _ = await runner.run_phases(point, Slot("live0"), server, client, ServerFacts())
            return records
    return {r.phase: r.as_dict() for r in asyncio.run(go())}   # as the store writes them


def BUSY() -> httpx.Response:
    return httpx.Response(200, text=exposition({"0": 2}, finished=5))


def NO_METRICS() -> httpx.Response:
    return httpx.Response(404)


def test_a_match_beside_others_on_a_server_the_sweep_does_not_own_is_not_lone(
        tmp_path, tok_dir):
    # the counter does not move here (a mock): the gauges decide
    recs = run_phases(tmp_path, tok_dir, "live", BUSY)
    for r in recs.values():
        assert r["verdict"] == "not-lone", r["reason"]
        assert r["reason"].startswith("ran beside at least 2 other request(s): not a "
                                      "lone-request verdict")
        assert "answer judged ok" in r["reason"]
        assert r["traffic"]["running_before"] == r["traffic"]["running_after"] == 2
    assert gate_exit_code(list(recs.values())) == 1


def test_a_server_without_metrics_is_not_lone_on_live_and_ok_on_its_own(tmp_path, tok_dir):
    live = run_phases(tmp_path / "live", tok_dir, "live", NO_METRICS)
    assert {r["verdict"] for r in live.values()} == {"not-lone"}
    assert "what ran beside it is unknown (/metrics answered HTTP 404)" in \
        live["cold"]["reason"]
    fresh = run_phases(tmp_path / "fresh", tok_dir, "fresh", NO_METRICS)
    assert {r["verdict"] for r in fresh.values()} == {"ok"}
    assert fresh["cold"]["traffic"]["alone"] is None    # recorded, not judged


def test_alone_on_live_is_ok_and_a_break_beside_others_stays_broken(tmp_path, tok_dir):
    # the counter moves by the measured request alone between the two scrapes of a phase
    seq = iter([exposition({"0": 0}, finished=n) for n in (5, 6, 6, 7)])
    recs = run_phases(tmp_path / "a", tok_dir, "live",
                      lambda: httpx.Response(200, text=next(seq)))
    assert {r["verdict"] for r in recs.values()} == {"ok"}
    assert all(r["traffic"]["alone"] for r in recs.values())
    broken = run_phases(tmp_path / "b", tok_dir, "live", BUSY, text="")
    # a wrong answer is evidence whatever ran beside it; its record says what did
    assert {r["verdict"] for r in broken.values()} == {"broken"}
    assert broken["self-hit"]["traffic"]["others"] == 2


def test_the_report_counts_no_not_lone_cell_clean(tmp_path, tok_dir):
    recs = list(run_phases(tmp_path, tok_dir, "live", BUSY).values())
    md = render_markdown(recs, [])
    assert "beside ≥2 others" in md
    assert "**no lone-request verdict**: 2 cells ran beside other requests" in md
    assert "- **Other traffic:** 2 of 2 phases ran beside other requests (up to 2 at once" in md
    assert "1 not-lone: residue 7" in md and "1 clean" not in md


def test_a_lone_residue_is_clean_beside_a_not_lone_one_and_the_rest_is_counted(
        tmp_path, tok_dir):
    seq = iter([exposition({"0": 0}, finished=n) for n in (5, 6, 6, 7)])
    alone = run_phases(tmp_path / "a", tok_dir, "live",
                       lambda: httpx.Response(200, text=next(seq)))
    beside = run_phases(tmp_path / "b", tok_dir, "live", BUSY)
    for r in beside.values():    # the same configuration, another residue
        r["residue"] = 8
    md = render_markdown([*alone.values(), *beside.values()], [])
    assert "1 clean on live only (no fresh server judged them): residue 7, 1 not-lone: " \
        "residue 8" in md
    assert "(2 `not-lone` cells, beside other requests, not counted)" in md
    assert "- **Other traffic:** 2 of 4 phases ran beside other requests" in md
    assert "; 2 ran alone." in md
