"""Issue 52's lab mechanisms, each driven over HTTP against a real lab process through the
history that shows it: broken with ``--patches none``, clean with its own patch and with
``all`` (docs/lab-engine.md, "Histories").

- abort-retry: align mode publishes a state block when its chunk is scheduled and writes it
  a step later (engine/lab/mamba_align.py, vllm PR #56525);
- evict: an evicted block's hash left in the map (engine/lab/evict_key.py);
- sibling: a prefill row batched after a whole-block row reads a page late
  (engine/lab/batch_layout.py, sglang #22819's shape).
"""
from __future__ import annotations

import json
import re
import socket
import threading
import time

import pytest

from labserver import HUGE, MTP, make_document, pad_to_residue, padding

DOC = make_document(1000)
OTHER = make_document(400, seed=5)   # the unrelated prompts' document
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'


def _content(lines: int, pad: int, head: str = "", doc: list[str] = DOC) -> str:
    return (f"{head}Copy the first 3 lines of the text below.\n\n" + "\n".join(doc[:lines])
            + "\n" + padding(pad))


EXPECTED = "\n".join(DOC[:3])


def _wait_log(srv, pattern: str, timeout: float = 30.0) -> re.Match:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        m = re.search(pattern, srv.log())
        if m:
            return m
        time.sleep(0.001)
    raise AssertionError(f"no log line {pattern!r}")


def _post_raw(srv, content: str, rid: str, stream: bool = False) -> socket.socket:
    """A chat request on a raw socket, left unread: closing the socket is the hang-up."""
    body = json.dumps({"model": "lab-copy", "max_tokens": 200, "stream": stream,
                       "messages": [{"role": "user", "content": content}]}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nX-Request-Id: " + rid.encode() + b"\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def _answer(srv, content: str, rid: str) -> dict:
    r = srv.http.post("/v1/chat/completions", headers={"X-Request-Id": rid},
                      json={"model": "lab-copy", "max_tokens": 200,
                            "messages": [{"role": "user", "content": content}]})
    r.raise_for_status()
    return r.json()


ABORT_ARGS = [*HUGE, "--speculative-config", NGRAM, "--mamba-cache-mode", "align",
              "--max-num-batched-tokens", "2048", "--max-model-len", "32768"]


ABORT_TRIES = 4   # servers an abort gets to land mid-prefill (the harness marks a miss invalid)


@pytest.mark.parametrize("patches,broken", [("none", True), ("align-publish-after-copy", False),
                                            ("all", False)])
def test_abort_retry_hits_a_state_block_never_written(server, patches, broken):
    for _ in range(ABORT_TRIES):   # a fresh server each: the pause can come after the prefill
        srv = server(*ABORT_ARGS, "--patches", patches)
        content, length = pad_to_residue(srv, lambda n: _content(900, n), 5)   # not k + 1
        sock = _post_raw(srv, content, "rl-a")
        _wait_log(srv, r"prefill chunk: request=chatcmpl-rl-a start=0 tokens=2048 ")
        # as the harness does on the first chunk line: pause scheduling, hang up, await the
        # abort, wake (the prefill may still win the race: .ci/run saw computed == of once)
        srv.http.post("/sleep", params={"level": 0, "mode": "keep"}).raise_for_status()
        sock.close()
        m = _wait_log(srv, r"aborted request=chatcmpl-rl-a computed=(\d+) of=(\d+) step=\d+")
        computed, of = int(m.group(1)), int(m.group(2))
        srv.http.post("/wake_up").raise_for_status()
        if computed < of:
            break
    assert of == length and 0 < computed < of and computed % 128 == 0   # mid-prefill
    assert srv.counters()["vllm:request_success_total"] >= 1
    retry = _answer(srv, content, "rl-b")
    assert retry["id"] == "chatcmpl-rl-b"
    cached = retry["usage"]["prompt_tokens_details"]["cached_tokens"]
    text = retry["choices"][0]["message"]["content"]
    if broken:   # the retry resumed from the block the abort left unwritten
        assert cached == computed and text == ""
    else:        # nothing was published: no hit where no state was written
        assert cached < computed and text == EXPECTED


def _lines_for(srv, tokens: int) -> int:
    """The fewest document lines whose prompt (no padding) templates to >= tokens."""
    lo, hi = 1, len(DOC)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if srv.templated_len(_content(mid, 0)) < tokens else (lo, mid)
    return lo


@pytest.mark.parametrize("patches", ["align-publish-after-copy", "all"])
def test_a_retry_publishes_the_state_its_aborted_twin_left_unwritten(server, patches):
    """abort-retry as the harness drives it (pause at the first chunk line, hang up, await
    the abort, wake, retry): the aborted request's block ending at ``computed`` stays cached
    with no state; the retry recomputes those tokens into its own block and writes the
    state there, and a later prompt whose hit ends in [computed, computed + 2048) must
    resume from it. Before the fix the patched publish kept the unwritten twin as the
    hash's block and refused the retry's state: the hit fell a whole mamba block short
    (the e2e abort-retry self-hit flake: cached_tokens 0 when computed was 2048)."""
    for _ in range(ABORT_TRIES):   # a fresh server each: the pause can come after the prefill
        srv = server(*ABORT_ARGS, "--patches", patches)
        content, length = pad_to_residue(srv, lambda n: _content(900, n), 5)
        sock = _post_raw(srv, content, "rl-a", stream=True)
        _wait_log(srv, r"prefill chunk: request=chatcmpl-rl-a start=0 ")
        srv.http.post("/sleep", params={"level": 0, "mode": "keep"}).raise_for_status()
        sock.close()
        m = _wait_log(srv, r"aborted request=chatcmpl-rl-a computed=(\d+) of=(\d+) ")
        computed = int(m.group(1))
        srv.http.post("/wake_up").raise_for_status()
        if computed < int(m.group(2)):
            break
    assert 0 < computed < int(m.group(2)) == length and computed % 2048 == 0
    retry = _answer(srv, content, "rl-retry")
    assert retry["choices"][0]["message"]["content"] == EXPECTED
    assert retry["usage"]["prompt_tokens_details"]["cached_tokens"] < computed
    probe = _content(_lines_for(srv, computed + 1024), 0)   # shares ~computed + 1024 tokens
    assert computed + 1024 <= srv.templated_len(probe) < computed + 1900
    hit = _answer(srv, probe, "rl-probe")
    assert hit["usage"]["prompt_tokens_details"]["cached_tokens"] == computed
    assert hit["choices"][0]["message"]["content"] == EXPECTED


def test_a_streamed_request_hung_up_mid_prefill_is_aborted_and_frees_its_blocks(server):
    """No token was streamed yet (the prefill is not done): the hang-up still aborts it."""
    srv = server(*ABORT_ARGS)
    content, length = pad_to_residue(srv, lambda n: _content(900, n), 5)
    before = srv.counters()
    sock = _post_raw(srv, content, "rl-st", stream=True)
    _wait_log(srv, r"prefill chunk: request=chatcmpl-rl-st start=0 ")
    sock.close()
    m = _wait_log(srv, r"aborted request=chatcmpl-rl-st computed=(\d+) of=(\d+) ")
    assert 0 < int(m.group(1)) < int(m.group(2)) == length
    after = srv.counters()
    assert after["vllm:request_success_total"] == before["vllm:request_success_total"] + 1
    assert after["vllm:num_requests_running"] == 0 and after["vllm:kv_cache_usage_perc"] == 0


EVICT_ARGS = [*HUGE, "--speculative-config", MTP, "--num-gpu-blocks-override", "82"]


@pytest.mark.parametrize("patches,broken", [("none", True), ("evict-group-key", False),
                                            ("all", False)])
def test_evict_then_resend_reads_a_phantom_hit(server, patches, broken):
    """A ~4.1k-token prompt in a pool of 82 blocks of 128 (2.5 prompts): three unrelated
    prompts evict its blocks; unpatched, their hashes still map to the reused blocks."""
    srv = server(*EVICT_ARGS, "--patches", patches)
    content, length = pad_to_residue(srv, lambda n: _content(130, n), 5, minimum=4096)
    assert length < 4300
    assert _answer(srv, content, "rl-p")["choices"][0]["message"]["content"] == EXPECTED
    for i in range(3):
        _answer(srv, _content(200, 5, head=f"Unrelated {i}. ", doc=OTHER), f"rl-q{i}")
    assert re.search(r"evicted blocks=\d+ from=[^ ]*chatcmpl-rl-p[, ]", srv.log())
    again = _answer(srv, content, "rl-p2")
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    text = again["choices"][0]["message"]["content"]
    if broken:   # a "full" hit on blocks that now hold the unrelated prompts' KV
        assert cached == length - 5 and text != EXPECTED
    else:
        assert cached < length - 5 and text == EXPECTED


def test_evict_key_is_right_in_the_dense_geometry(server):
    """One KV cache group (0): the unpatched key is the right one, nothing stale."""
    srv = server(*EVICT_ARGS, "--patches", "none", "--geometry", "dense")
    content, length = pad_to_residue(srv, lambda n: _content(130, n), 5, minimum=4096)
    _answer(srv, content, "rl-p")
    for i in range(3):
        _answer(srv, _content(200, 5, head=f"Unrelated {i}. ", doc=OTHER), f"rl-q{i}")
    again = _answer(srv, content, "rl-p2")
    assert again["choices"][0]["message"]["content"] == EXPECTED
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] < length - 5


def _sibling_step(srv, first: str, measured: str) -> tuple[dict, dict]:
    """Both cold prefills in one step: pause the scheduler (keep), queue both, wake."""
    srv.http.post("/sleep", params={"level": 0, "mode": "keep"}).raise_for_status()
    out: dict[str, dict] = {}
    threads = []
    for rid, content in (("rl-s", first), ("rl-m", measured)):
        t = threading.Thread(target=lambda r=rid, c=content: out.__setitem__(r, _answer(srv, c, r)))
        t.start()
        threads.append(t)
        # queued in this order (the sibling is row 0); as in vLLM 0.26.0 a paused scheduler
        # publishes no gauge, so the trace's queued line is the sign it arrived
        _wait_log(srv, rf"queued request=chatcmpl-{rid} of=\d+ waiting={len(threads)} paused=1")
    assert srv.counters().get("vllm:num_requests_waiting", 0) == 0
    srv.http.post("/wake_up").raise_for_status()
    for t in threads:
        t.join(60)
    _wait_log(srv, r"prefill chunk: request=chatcmpl-rl-m start=0 .* step=1 "
                   r"batch=chatcmpl-rl-s,chatcmpl-rl-m")
    return out["rl-s"], out["rl-m"]


@pytest.mark.parametrize("residue,patches,broken", [
    (0, "none", True), (0, "prefill-row-offsets", False), (0, "all", False), (5, "none", False)])
def test_sibling_row_after_a_whole_block_row_reads_a_page_late(server, residue, patches, broken):
    srv = server(*HUGE, "--speculative-config", MTP, "--max-num-batched-tokens", "16384",
                 "--patches", patches)
    sib, _ = pad_to_residue(srv, lambda n: _content(130, n, head="Sibling. "), residue,
                            minimum=4096)
    measured, _ = pad_to_residue(srv, lambda n: _content(130, n), residue, minimum=4096)
    first, second = _sibling_step(srv, sib, measured)
    assert first["choices"][0]["message"]["content"] == EXPECTED   # row 0 is never shifted
    text = second["choices"][0]["message"]["content"]
    assert (text != EXPECTED) == broken
    alone = _answer(srv, measured + " ", "rl-alone")   # the same length alone: clean
    assert alone["choices"][0]["message"]["content"] == EXPECTED


def _prompt_lps(srv, content: str, rid: str) -> list:
    r = srv.http.post("/v1/chat/completions", headers={"X-Request-Id": rid},
                      json={"model": "lab-copy", "max_tokens": 200, "prompt_logprobs": 1,
                            "messages": [{"role": "user", "content": content}]})
    r.raise_for_status()
    return r.json()["prompt_logprobs"]


def _first_difference(a: list, b: list) -> int | None:
    assert len(a) == len(b)
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


@pytest.mark.parametrize("patches", ["none", "evict-group-key"])
def test_prompt_logprobs_show_the_first_position_read_wrong(server, patches):
    """The cold send's prompt logprobs are the reference; a patched resend (a partial hit)
    repeats them exactly, a phantom hit differs from the first block it reads wrong."""
    srv = server(*EVICT_ARGS, "--patches", patches)
    content, length = pad_to_residue(srv, lambda n: _content(130, n), 5, minimum=4096)
    cold = _prompt_lps(srv, content, "rl-p")
    assert len(cold) == length and cold[0] is None
    assert all(len(e) >= 1 for e in cold[1:])
    for i in range(3):
        _answer(srv, _content(200, 5, head=f"Unrelated {i}. ", doc=OTHER), f"rl-q{i}")
    first = _first_difference(cold, _prompt_lps(srv, content, "rl-p2"))
    if patches == "none":
        assert first is not None and first < 128   # the prompt's first block was reused
    else:
        assert first is None


def test_prompt_logprobs_are_refused_with_a_stream(server):
    srv = server(*HUGE)
    r = srv.http.post("/v1/chat/completions", json={
        "model": "lab-copy", "stream": True, "prompt_logprobs": 1,
        "messages": [{"role": "user", "content": "Copy the first line.\n\nx"}]})
    assert r.status_code == 400 and "prompt_logprobs" in r.text


def test_async_scheduling_and_pool_override_are_reported(server):
    srv = server(*HUGE, "--no-async-scheduling", "--num-gpu-blocks-override", "100")
    eff = srv.http.get("/version").json()["effective_config"]
    assert eff["async_scheduling"] is False and eff["num_gpu_blocks_override"] == 100
    assert eff["kv_cache_tokens"] == 100 * 128
    plain = server(*HUGE).http.get("/version").json()["effective_config"]
    assert "async_scheduling" not in plain and "num_gpu_blocks_override" not in plain
