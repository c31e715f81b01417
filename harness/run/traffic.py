"""What else a server ran while a phase was measured, from the two /metrics scrapes the
phase takes anyway (before its request, for tok/step, and after the answer).

Bug B needs a *lone* request: the uniform-decode check is over the whole batch, so the
same ``1 + k``-token final chunk beside other requests' prefill chunks runs PIECEWISE and
answers right (issue 33 item 3: six other clients on a `--url` server, and residue 4
came out clean). A sweep that starts its own servers sends them nothing else; a server it
does not own (``--url``) runs whatever its other clients send. So every judged phase
records ``traffic`` (docs/records.md), and on a server the sweep does not own
(``isolation.Isolation.lone_by_construction`` false) an answer that matched but was not
shown lone is ``not-lone``, never ``ok``: ``not_lone_reason``.

The harness's own request is in neither gauge: the first scrape is read before the
request is sent and the second after its answer came back, and vLLM sets
``vllm:num_requests_running`` / ``_waiting`` from the scheduler's stats of each engine
step, made after that step's finished requests left the running queue
(``Scheduler.update_from_output`` -> ``make_stats``) and recorded by the frontend before
it hands the output out (``AsyncLLM.output_handler``); the lab engine sets them the same
way (``engine/lab/scheduler._gauges``). ``vllm:request_success_total`` counts every
finished request once, the measured one included: ``finished_between`` is its delta less
one, the other requests that came *and went* between the scrapes, which the gauges alone
would miss. Together they see every other request that overlapped the window.
"""
from __future__ import annotations

from typing import Any

from ..serve.client import FINISHED, RUNNING, WAITING, MetricsScrape

__all__ = ["traffic_facts", "not_lone_reason", "traffic_words"]


def _count(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def _missing(before: MetricsScrape, after: MetricsScrape) -> str | None:
    """Why some count is null: the scrape's own error, else the metrics it lacked."""
    if before.error or after.error:
        return before.error or after.error
    lacks = [name for name, attr in ((RUNNING, "running"), (WAITING, "waiting"),
                                     (FINISHED + "_total", "finished"))
             if getattr(before, attr) is None or getattr(after, attr) is None]
    return f"/metrics has no {', '.join(lacks)}" if lacks else None


def traffic_facts(before: MetricsScrape, after: MetricsScrape) -> dict[str, Any]:
    """The record's ``traffic``: the other requests the server held at each scrape and
    finished between them, ``others`` (at least that many other requests were on the
    server while the phase ran), ``alone`` (true: none; false: some; null: a count is
    missing, and ``missing`` says why)."""
    rb, wb = _count(before.running), _count(before.waiting)
    ra, wa = _count(after.running), _count(after.waiting)
    fin = None
    if before.finished is not None and after.finished is not None:
        fin = max(0, _count(after.finished - before.finished) - 1)   # less the measured one
    held = [sum(p) for p in ((rb, wb), (ra, wa)) if None not in p]
    seen = held + ([fin] if fin is not None else [])
    others = max(seen) if seen else None
    missing = _missing(before, after)
    alone = (others == 0) if missing is None else (False if others else None)
    out = {"running_before": rb, "waiting_before": wb, "running_after": ra,
           "waiting_after": wa, "finished_between": fin, "others": others, "alone": alone}
    if missing:
        out["missing"] = missing
    return out


def traffic_words(t: dict[str, Any]) -> str:
    """``2 running, 0 waiting before; 2 running, 1 waiting after; 3 others finished
    between`` (``?`` for a count the server did not give)."""
    def n(key: str) -> str:
        return "?" if t.get(key) is None else str(t[key])
    return (f"{n('running_before')} running, {n('waiting_before')} waiting before; "
            f"{n('running_after')} running, {n('waiting_after')} waiting after; "
            f"{n('finished_between')} others finished between")


def not_lone_reason(t: dict[str, Any] | None) -> str | None:
    """Why a phase on a server the sweep does not own is not a lone-request verdict, or
    None when the scrapes show it ran alone."""
    if t is None:
        return ("not shown to run alone on a server the sweep does not own: no /metrics "
                "scrapes")
    if t.get("alone"):
        return None
    if t.get("alone") is False:
        return (f"ran beside at least {t.get('others')} other request(s): not a lone-request"
                f" verdict on a server the sweep does not own (/metrics: {traffic_words(t)})")
    return (f"not shown to run alone on a server the sweep does not own: what ran beside "
            f"it is unknown ({t.get('missing')})")
