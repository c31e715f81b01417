"""The opt-in scheduler trace of the vLLM plugin (engine/vllm/patches/sched_trace.py): its
lines have the lab's format, so harness/run/load.py reads the batch of a final prefill
chunk from a vLLM server's log the same way; it wraps the installed vLLM's own
``Scheduler.schedule`` and reads fields that its ``SchedulerOutput`` and ``Request`` have."""
from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace

from tests._vllm import require_vllm

from engine.vllm.patches import sched_trace
from harness.run.load import beside_from_log, preempted_in_log

vllm = require_vllm()


def test_a_final_chunk_beside_decode_rows_reads_back_as_the_labs_line(tmp_path):
    reqs = {"chatcmpl-abc-1234abcd": SimpleNamespace(num_computed_tokens=3972,
                                                     num_prompt_tokens=3972)}
    for i in range(4):   # decoding: 1 + k = 4 tokens each, already past their prompts
        reqs[f"bg{i}"] = SimpleNamespace(num_computed_tokens=900 + 4, num_prompt_tokens=600)
    lines = sched_trace.trace_lines(reqs, {"bg0": 4, "bg1": 4, "bg2": 4, "bg3": 4,
                                           "chatcmpl-abc-1234abcd": 4})
    assert len(lines) == 1
    log = tmp_path / "server.log"
    log.write_text(f"INFO 12-01 10:00:00 [sched_trace.py:60] {lines[0]}\n")
    assert beside_from_log(log, "chatcmpl-abc") == {
        "final_chunk": 4, "prompt": 3972, "computed_before": 3968, "batch_reqs": 5,
        "batch_tokens": 20, "decode_reqs": 4, "prefill_reqs": 1, "dispatch": "unknown"}
    log.write_text(log.read_text() + "INFO [sched_trace.py:70] preempted request="
                   "chatcmpl-abc-1234abcd (recomputed when resumed)\n")
    assert preempted_in_log(log, "chatcmpl-abc") == 1
    assert preempted_in_log(log, "chatcmpl-other") == 0
    # a chunk that is not the last one, and a decode step, write nothing
    mid = {"r": SimpleNamespace(num_computed_tokens=1024, num_prompt_tokens=3972)}
    assert sched_trace.trace_lines(mid, {"r": 512}) == []


def test_install_wraps_the_installed_schedulers_schedule(monkeypatch):
    from vllm.v1.core.sched import scheduler as mod
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

    names = {f.name for f in dataclasses.fields(SchedulerOutput)}
    assert {"num_scheduled_tokens", "total_num_scheduled_tokens"} <= names
    init = inspect.getsource(Request.__init__)
    assert "self.num_computed_tokens" in init and "self.num_prompt_tokens" in init
    orig = mod.Scheduler.schedule
    monkeypatch.setattr(mod.Scheduler, "schedule", orig)   # restored after the test
    monkeypatch.setattr(mod.Scheduler, "finish_requests", mod.Scheduler.finish_requests)
    monkeypatch.setattr(mod.Scheduler, "add_request", mod.Scheduler.add_request)
    monkeypatch.delenv(sched_trace.ENV, raising=False)
    assert sched_trace.install() == "off" and mod.Scheduler.schedule is orig
    monkeypatch.setenv(sched_trace.ENV, "1")
    assert sched_trace.install() == "installed"
    assert mod.Scheduler.schedule.__wrapped__ is orig
    assert sched_trace.install() == "installed"              # once per process
    assert mod.Scheduler.schedule.__wrapped__ is orig


def _install_wrapping(monkeypatch, mod, name: str) -> None:
    """The trace installed on the installed vLLM's scheduler (its methods restored after the
    test), and ``Scheduler.NAME`` wrapping the method it had."""
    for each in ("schedule", "finish_requests", "add_request"):
        monkeypatch.setattr(mod.Scheduler, each, getattr(mod.Scheduler, each))
    orig = getattr(mod.Scheduler, name)
    monkeypatch.setenv(sched_trace.ENV, "1")
    sched_trace.install()
    if getattr(orig, "_residue_lab_trace", False):   # wrapped by an earlier install here
        orig = orig.__wrapped__
    assert getattr(mod.Scheduler, name).__wrapped__ is orig


def test_install_wraps_finish_requests_for_the_abort_line(monkeypatch):
    """--history abort-retry: the abort of a disconnected client lands in the installed
    vLLM's ``Scheduler.finish_requests(ids, RequestStatus.FINISHED_ABORTED)``."""
    from vllm.v1.core.sched import scheduler as mod
    from vllm.v1.request import RequestStatus

    assert RequestStatus.is_finished(RequestStatus.FINISHED_ABORTED)
    assert "finish_requests" in inspect.getsource(mod.Scheduler)
    _install_wrapping(monkeypatch, mod, "finish_requests")
    held = {"r": SimpleNamespace(num_computed_tokens=512, num_prompt_tokens=4100,
                                 is_finished=lambda: False)}
    seen = []
    fake = SimpleNamespace(requests=held)
    monkeypatch.setattr(sched_trace, "logger", SimpleNamespace(info=seen.append))
    try:   # the real method needs a real scheduler: only the line written before it matters
        mod.Scheduler.finish_requests(fake, iter(["r"]), RequestStatus.FINISHED_ABORTED)
    except Exception:
        pass
    assert seen == ["aborted request=r computed=512 of=4100 step=" + seen[0].rsplit("=", 1)[1]]


def test_install_wraps_add_request_for_the_queued_line(monkeypatch):
    """--history sibling: a request sent while scheduling is paused (``mode=keep``,
    ``PauseState.PAUSED_ALL``) reaches ``Scheduler.add_request`` and its waiting queue, but no
    step runs, so no gauge says so: the queued line, read back as the lab's, does."""
    from vllm.v1.core.sched import scheduler as mod
    from vllm.v1.core.sched.interface import PauseState
    from harness.run.history_log import parse_line

    assert "self.waiting" in inspect.getsource(mod.Scheduler.add_request) or \
        "_enqueue_waiting_request" in inspect.getsource(mod.Scheduler.add_request)
    _install_wrapping(monkeypatch, mod, "add_request")
    req = SimpleNamespace(request_id="chatcmpl-rl-ab-m-1f", num_prompt_tokens=1152)
    for state, paused in ((PauseState.PAUSED_ALL, 1), (PauseState.UNPAUSED, 0)):
        sched = SimpleNamespace(pause_state=state, waiting=[object(), req])
        e = parse_line(sched_trace.queued_line(sched, req))
        assert (e.kind, e.request, e.of, e.tokens, e.start) == (
            "queued", "chatcmpl-rl-ab-m-1f", 1152, 2, paused)
