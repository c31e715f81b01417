"""#18: dflash k=3 at CTX=huge geometry promotes the drafter's sliding-window block to the
page block (2048) -- larger than the 128 hash unit. Unpatched, the first request trips
find_longest_cache_hit's assert: the engine core dies, requests get 500, /health fails
and the process exits non-zero. With sliding-window-guard the group takes a clean miss."""
from __future__ import annotations

import httpx

from labserver import DFLASH3, DFLASH7, FULL, HUGE, make_document

DOC = make_document(12)
PROMPT = "Reproduce the first 3 lines of the document below exactly.\n\n" + "\n".join(DOC)


def test_issue18_engine_dies_on_first_request(server):
    srv = server("--speculative-config", DFLASH3, "-cc", FULL, "--patches", "none", *HUGE)
    eff = srv.http.get("/version").json()
    assert eff["effective_config"]["sliding_window_block"] == 2048
    assert eff["patches"]["sliding-window-guard"] == "off"
    r = srv.http.post("/v1/chat/completions",
                      json={"model": "lab-copy", "messages": [{"role": "user", "content": PROMPT}]})
    assert r.status_code == 500
    assert "error" in r.json()
    # streamed requests after death also get a 500, not a dropped connection
    r2 = srv.http.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert r2.status_code == 500
    h = srv.http.get("/health")
    assert h.status_code != 200
    assert srv.proc.wait(10) != 0
    log = srv.log()
    assert "AssertionError" in log and "EngineCore encountered a fatal error" in log
    assert "find_longest_cache_hit" in log


def test_issue18_guard_serves(server):
    srv = server("--speculative-config", DFLASH3, "-cc", FULL,
                 "--patches", "sliding-window-guard", *HUGE)
    expected = "\n".join(DOC[:3])
    for _ in range(2):
        out = srv.chat(PROMPT)
        assert out["choices"][0]["message"]["content"] == expected
        assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # clean miss
    assert srv.http.get("/health").status_code == 200
    assert srv.proc.poll() is None


def test_dflash7_sliding_window_not_promoted(server):
    srv = server("--speculative-config", DFLASH7, "--patches", "none", *HUGE)
    assert srv.http.get("/version").json()["effective_config"]["sliding_window_block"] == 128
    assert srv.chat(PROMPT)["choices"][0]["message"]["content"] == "\n".join(DOC[:3])
    # alive after the request: a dead engine core fails /health at once (the process
    # only exits DEAD_EXIT_DELAY_S later, so polling the process alone proves little)
    assert srv.http.get("/health").status_code == 200
    assert srv.proc.poll() is None


def test_issue18_first_request_streamed_gets_500(server):
    srv = server("--speculative-config", DFLASH3, "-cc", FULL, "--patches", "none", *HUGE)
    r = srv.http.post("/v1/chat/completions", json={
        "model": "lab-copy", "messages": [{"role": "user", "content": PROMPT}], "stream": True})
    assert r.status_code == 500 and "error" in r.json()
    assert srv.proc.wait(10) != 0
