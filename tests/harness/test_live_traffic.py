"""Issue 33 item 3, "--url under other traffic", end to end: a lab server with the
residue-4 break, six other clients streaming long prompts on it, and ``sweep --url``
through the real entry point.

Before the fix that sweep said "3 clean on live only", "the sweep disagrees: residue 4 is
clean" and exit 0: residue 4's 4-token final chunk ran beside the other clients' decode
steps, a batch that is not the captured plan's, and answered right. The server here
captures FULL graphs up to 16 tokens (``max_cudagraph_capture_size``, vLLM's
CompilationConfig field): a lone 4-token chunk still replays the captured verify plan
(the control sweep breaks residue 4), while beside six decode rows (24 tokens more) every
batch runs PIECEWISE, the dispatch the issue's server log showed. So the masking is
certain, not a race, and so is the overlap: the other clients decode for ever
(``ignore_eos``) and the sweep starts only once ``/metrics`` shows all six running.
"""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_for
from tests.harness.test_live_url import manifest, records, still_serving, sweep
from tests.lab.labserver import HUGE, MTP, lab_server, make_document

OTHERS = 6
CAPTURE = {"cudagraph_mode": "FULL_AND_PIECEWISE", "max_cudagraph_capture_size": 16}
SERVER = [*HUGE, "--speculative-config", MTP, "-cc", json.dumps(CAPTURE), "--patches",
          "none", "--max-model-len", "245760"]


class OtherClients:
    """``n`` clients that are not the sweep: each streams one long prompt and decodes
    until told to stop (``ignore_eos``, a ``max_tokens`` no sweep outlasts, special tokens
    as text so no step is silent), on its own thread and connection. Leaving the block closes every stream (the server aborts the
    request)."""

    def __init__(self, srv, n: int):
        self.srv, self.url, self.n = srv, srv.url, n
        self.chunks = [0] * n
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                         for i in range(n)]

    def _client(self, i: int) -> None:
        doc = "\n".join(make_document(200, seed=500 + i))   # ~4,000 tokens, its own text
        body = {"model": "lab-copy", "messages": [{"role": "user", "content":
                f"Summarise the report below.\n\n{doc}"}], "max_tokens": 200_000,
                "temperature": 0.0, "stream": True, "ignore_eos": True,
                # once the copy model has copied the report it emits <|im_end|> only: shown
                # as text (vLLM's sampling parameter), so every step still sends a line and
                # a client sees its stop flag within one step, however long the sweep took
                "skip_special_tokens": False}
        try:
            with httpx.Client(timeout=60) as c, \
                    c.stream("POST", self.url + "/v1/chat/completions", json=body) as r:
                r.raise_for_status()
                for line in r.iter_lines():
                    self.chunks[i] += int(line.startswith("data:"))
                    if self._stop.is_set():
                        return
        except BaseException as e:   # noqa: BLE001 (reported by the test, not lost)
            self.errors.append(e)

    def _running(self) -> float:
        return self.srv.counters().get("vllm:num_requests_running", 0)

    def running(self) -> bool:
        """The readiness signal: every client has streamed and the server's own gauge
        counts all of them running (a client that failed first fails the wait)."""
        assert not self.errors, self.errors
        return all(self.chunks) and self._running() >= self.n

    def all_streaming(self) -> bool:
        return all(t.is_alive() for t in self._threads) and not self.errors

    def __enter__(self) -> "OtherClients":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        # the server as it was found: no request of these left running for the next test
        try:
            wait_for(lambda: self._running() == 0, 30, "the other clients' requests aborted")
        except AssertionError as e:
            c = self.srv.counters()
            state = {k: c.get(k) for k in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                                           "vllm:num_preemptions_total")}
            alive = [t.is_alive() for t in self._threads]
            raise AssertionError(f"{e}: {state}, threads alive {alive}, chunks {self.chunks}, "
                                 f"errors {self.errors}") from None


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_server(SERVER, tmp_path_factory.mktemp("lab") / "lab.log") as srv:
        yield srv


def report(out: Path) -> str:
    return next(out.glob("*.md")).read_text()


def test_alone_the_server_breaks_residue_4_and_the_records_say_alone(lab, tmp_path):
    """The control: the same server without other clients has the break, and every phase
    was seen alone (the measured request in neither gauge, once in the counter)."""
    out = tmp_path / "out"
    r = sweep("--url", lab.url, "--residues", "4", "--out", str(out))
    assert r.returncode == 1, r.stderr[-2000:]
    by = {x["phase"]: x for x in records(out)}
    assert by["self-hit"]["verdict"] == "broken", by["self-hit"]["reason"]
    for x in by.values():
        assert x["traffic"] == {"running_before": 0, "waiting_before": 0, "running_after": 0,
                                "waiting_after": 0, "finished_between": 0, "others": 0,
                                "alone": True}, x["traffic"]
    assert "- **Other traffic:** none seen: each of the 2 phases ran alone" in report(out)


def test_beside_six_other_clients_no_cell_is_clean_and_the_exit_is_not_0(lab, tmp_path):
    out = tmp_path / "out"
    with OtherClients(lab, OTHERS) as others:
        wait_for(others.running, 60, f"{OTHERS} other clients running")
        r = sweep("--url", lab.url, "--residues", "3,4,5", "--out", str(out))
        assert others.all_streaming(), others.errors   # they overlapped the whole sweep
    assert r.returncode == 1, r.stderr[-2000:]
    recs = records(out)
    assert len(recs) == 6
    for x in recs:
        # every answer matched, and none is a lone-request verdict
        assert x["verdict"] == "not-lone", (x["residue"], x["phase"], x["reason"])
        assert "answer judged ok" in x["reason"] and "at least 6 other" in x["reason"]
        t = x["traffic"]
        assert t["running_before"] >= OTHERS and t["running_after"] >= OTHERS, t
        assert t["others"] >= OTHERS and t["alone"] is False, t
    # the issue's server log: residue 4's 4-token chunk beside the others, PIECEWISE
    hit4 = next(x for x in recs if x["residue"] == 4 and x["phase"] == "self-hit")
    assert hit4["computed_tail"] == 4
    chunks = re.findall(r"final prefill chunk: request=\S+ tokens=4 prompt=(\d+) .*"
                        r"decode_reqs=(\d+) .*dispatch=(\w+)", lab.log())
    assert (str(hit4["prompt_tokens"]), str(OTHERS), "PIECEWISE") in chunks, chunks
    md = report(out)
    assert "residue 4 is clean" not in md and "3 clean" not in md
    assert "3 not-lone: residues 3–5" in md
    assert "**no lone-request verdict**: 6 cells ran beside other requests" in md
    assert (f"- **Other traffic:** 6 of 6 phases ran beside other requests (up to {OTHERS} "
            "at once") in md
    assert "beside ≥6 others" in md
    assert manifest(out)["exit_code"] == 1
    still_serving(lab)
