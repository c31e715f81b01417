"""The server's own trace of a history, read back from its log: the scheduler lines of the
lab (``engine/lab/sched_log.py``) and of vLLM's opt-in trace
(``engine/vllm/patches/sched_trace.py``), one format for both (the contract of issue 52):

    prefill chunk: request=<id> start=<s> tokens=<n> of=<L> step=<step> batch=<id>,<id>
    aborted request=<id> computed=<c> of=<L> step=<step>
    evicted blocks=<n> from=<id>,<id> request=<id> step=<step>
    final prefill chunk: request=<id> tokens=<n> prompt=<L> computed=<c> ... prefill_reqs=<p> ...
    queued request=<id> of=<L> waiting=<n> paused=<0|1>

A send is found by its tag (the harness's ``X-Request-Id``, which vLLM puts into its request
id) or, where the server named the request itself, by its prompt length (unique per point
on a fresh server). ``LogWatch`` follows a log from where it was opened and waits, polling
the file, for the first line that a condition accepts (or for a task to end first).
"""
from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = ["TraceEvent", "parse_line", "LogWatch", "events_of"]

_CHUNK = re.compile(r"(?<!final )prefill chunk: request=(?P<id>\S+) start=(?P<start>\d+) "
                    r"tokens=(?P<tokens>\d+) of=(?P<of>\d+)(?: step=(?P<step>\d+))?"
                    r"(?: batch=(?P<batch>\S*))?")
_ABORT = re.compile(r"aborted request=(?P<id>\S+) computed=(?P<computed>\d+) of=(?P<of>\d+)"
                    r"(?: step=(?P<step>\d+))?")
_EVICT = re.compile(r"evicted blocks=(?P<n>\d+) from=(?P<from>\S*) request=(?P<id>\S+)"
                    r"(?: step=(?P<step>\d+))?")
_FINAL = re.compile(r"final prefill chunk: request=(?P<id>\S+) tokens=(?P<tokens>\d+) "
                    r"prompt=(?P<of>\d+) computed=(?P<computed>\d+) batch_reqs=(?P<reqs>\d+) "
                    r"batch_tokens=\d+ decode_reqs=\d+ prefill_reqs=(?P<pre>\d+)")

_QUEUED = re.compile(r"queued request=(?P<id>\S+) of=(?P<of>\d+) waiting=(?P<n>\d+)"
                     r" paused=(?P<paused>[01])")


@dataclass(frozen=True)
class TraceEvent:
    kind: str                 # chunk | abort | final | evict | queued
    request: str
    of: int                   # the request's prompt length
    line: str                 # the log line as written (the record keeps it)
    start: int | None = None  # chunk: first position; abort / final: tokens computed before;
                              # queued: 1 where scheduling was paused
    tokens: int | None = None   # queued: the waiting queue's length after it
    step: int | None = None
    prefill_reqs: int | None = None   # final: prefills in the step
    batch: tuple[str, ...] = ()

    def of_send(self, tag: str | None, length: int | None) -> bool:
        """This event is of the send tagged ``tag`` (or, untagged, of prompt ``length``)."""
        if tag and tag in self.request:
            return True
        return length is not None and self.of == length and not (tag and "rl-" in self.request)


def parse_line(line: str) -> TraceEvent | None:
    text = line.strip()
    if m := _FINAL.search(text):
        return TraceEvent("final", m["id"], int(m["of"]), text, start=int(m["computed"]),
                          tokens=int(m["tokens"]), prefill_reqs=int(m["pre"]))
    if m := _CHUNK.search(text):
        return TraceEvent("chunk", m["id"], int(m["of"]), text, start=int(m["start"]),
                          tokens=int(m["tokens"]), step=_int(m["step"]),
                          batch=tuple(b for b in (m["batch"] or "").split(",") if b))
    if m := _EVICT.search(text):   # batch: the requests whose cached blocks were evicted
        return TraceEvent("evict", m["id"], 0, text, tokens=int(m["n"]), step=_int(m["step"]),
                          batch=tuple(b for b in m["from"].split(",") if b))
    if m := _QUEUED.search(text):   # start: 1 where scheduling was paused
        return TraceEvent("queued", m["id"], int(m["of"]), text, start=int(m["paused"]),
                          tokens=int(m["n"]))
    if m := _ABORT.search(text):
        return TraceEvent("abort", m["id"], int(m["of"]), text, start=int(m["computed"]),
                          step=_int(m["step"]))
    return None


def _int(v: str | None) -> int | None:
    return int(v) if v is not None else None


def events_of(text: str) -> list[TraceEvent]:
    return [e for line in text.splitlines() if (e := parse_line(line)) is not None]


class LogWatch:
    """A server log followed from the moment the watch is made."""

    POLL_S = 0.005   # how often the file is read again while waiting

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = _size(path)
        self.seen: list[TraceEvent] = []
        self._partial = ""

    def read(self) -> list[TraceEvent]:
        """The trace events written since the last read (complete lines only)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        text = self._partial + data.decode(errors="replace")
        lines = text.split("\n")
        self._partial = lines.pop()
        new = [e for ln in lines if (e := parse_line(ln)) is not None]
        self.seen += new
        return new

    async def wait(self, accept: Callable[[TraceEvent], bool], timeout: float,
                   until: asyncio.Future | None = None) -> TraceEvent | None:
        """The first event (already seen or new) ``accept`` takes; None once ``timeout``
        passed or ``until`` is done and the log has nothing more."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for e in self.seen:
            if accept(e):
                return e
        while True:
            ended = until is not None and until.done()
            for e in self.read():
                if accept(e):
                    return e
            if ended or loop.time() > deadline:
                return None
            await asyncio.sleep(self.POLL_S)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
