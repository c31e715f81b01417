"""The boot of one vLLM 0.26.0 server, split into stages from its own log.

What the log shows (message wording checked in the 0.26.0 wheel, file: line):

- API server up: the first timestamped line. The API server logs nothing before its imports
  are done (``vllm.entrypoints.openai.api_server`` imports torch, transformers, FastAPI), so
  process start to this line is Python start-up plus imports. Process start itself is not
  in the log: pass ``started_at`` (the launcher's clock) or that stage stays ``None``.
- engine core up: the first ``(EngineCore pid=N)`` line (``utils/system_utils.py``
  ``decorate_logs``). ``python -m vllm.entrypoints.openai.api_server`` sets
  ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` (``cli_env_setup``), so the engine core is a fresh
  interpreter that imports everything again.
- weights: ``Model loading took %s GiB memory and %.6f seconds`` (``v1/worker/gpu_model_runner.py``).
- compile: ``torch.compile took %.2f s in total`` (``compilation/monitor.py``); a cache hit
  says ``Directly load the compiled graph(s) for compile range`` (``compilation/backends.py``)
  or ``Directly load AOT compilation from path`` (``compilation/decorators.py``), a miss
  ``Compiling a graph for compile range %s takes %.2f s``.
- profiling/warm-up: ``Initial profiling/warmup run took %.2f s`` (``compilation/monitor.py``).
- graph capture: ``Graph capturing finished in %.0f secs, took %.2f GiB`` (whole seconds).
- engine init: ``init engine (profile, create kv cache, warmup model) took %.2f s``
  (``v1/engine/core.py``).
- ready: ``Starting vLLM server on http://...`` (``entrypoints/openai/api_server.py``), the
  last timestamped line before uvicorn's untimestamped ``Application startup complete.``;
  pass ``health_at`` (when ``/health`` first answered 200) for the launcher's own reading.
- first request: ``Triton kernel JIT compilation during inference: NAME`` lines
  (``utils/jit_monitor.py``) name the kernels compiled on the first requests; their extra
  latency is :func:`first_request_extra_s` of the measured request latencies.

Log timestamps are local wall-clock time to the second with no year or zone (so each
stage is ±0.5 s against ``started_at``, taken as the middle of its second): offsets from
``started_at`` assume the log was written on the machine that parses it (the benchmark and
the harness do both on the same host). A stage the log does not show is ``None``, never
guessed.
"""
from __future__ import annotations

import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Sequence

__all__ = ["BootSplit", "first_request_extra_s", "parse_boot_log", "compile_cache_from_log"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PREFIX = re.compile(r"^\((?P<proc>[A-Za-z][\w]*) pid=(?P<pid>\d+)\) ")
_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                    r"(?P<mo>\d\d)-(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.\d+)? \[")
_FLOAT = r"(-?\d+(?:\.\d+)?)"
_WEIGHTS = re.compile(r"Model loading took " + _FLOAT + r" GiB memory and " + _FLOAT + " seconds")
_COMPILE = re.compile(r"torch\.compile took " + _FLOAT + r" s in total")
_COMPILE_HIT = re.compile(r"Directly load the compiled graph\(s\) for compile range|"
                          r"Directly load AOT compilation from path")
_COMPILE_MISS = re.compile(r"Compiling a graph for compile range .* takes " + _FLOAT + " s")
_DYNAMO = re.compile(r"Dynamo bytecode transform time: " + _FLOAT + " s")
_PROFILE = re.compile(r"Initial profiling/warmup run took " + _FLOAT + " s")
_CAPTURE = re.compile(r"Graph capturing finished in " + _FLOAT + r" secs, took " + _FLOAT + " GiB")
_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _FLOAT + " s")
_READY = re.compile(r"Starting vLLM server on (\S+)")
_STARTUP_DONE = "Application startup complete."
_JIT = re.compile(r"Triton kernel JIT compilation during inference: (\w+(?:\.\w+)*)")
_SPAWN_FORCED = "We must use the `spawn` multiprocessing start method"


@dataclass(frozen=True)
class BootSplit:
    """Stages of one boot. ``*_at_s``: seconds since ``started_at`` (or, without it, since
    the first log line); durations are the engine's own figures from the log."""

    started_at: float | None = None
    api_server_at_s: float | None = None      # first API-server line: imports done
    engine_core_at_s: float | None = None     # first EngineCore line
    weights_at_s: float | None = None
    weights_s: float | None = None
    weights_gib: float | None = None
    compile_s: float | None = None
    compile_cache: str | None = None           # "hit" | "miss" | "mixed" | None
    dynamo_s: float | None = None
    profile_warmup_s: float | None = None
    graph_capture_s: float | None = None
    graph_capture_gib: float | None = None
    init_engine_s: float | None = None
    ready_at_s: float | None = None            # "Starting vLLM server on ..."
    startup_complete: bool = False             # uvicorn's "Application startup complete."
    health_at_s: float | None = None           # the launcher's /health 200, when given
    first_request_extra_s: float | None = None
    jit_kernels: tuple[str, ...] = field(default_factory=tuple)
    engine_core_spawn_forced: bool = False     # vLLM overrode fork with spawn

    def durations(self) -> dict[str, float | None]:
        """Consecutive stages as durations (``None`` where either end is unknown)."""
        def gap(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else round(b - a, 3)

        start = 0.0 if self.started_at is not None else None
        ready = self.health_at_s if self.health_at_s is not None else self.ready_at_s
        return {
            "python_start_and_imports_s": gap(start, self.api_server_at_s),
            "api_server_to_engine_core_s": gap(self.api_server_at_s, self.engine_core_at_s),
            "engine_core_to_weights_s": gap(self.engine_core_at_s, self.weights_at_s),
            "compile_s": self.compile_s,
            "graph_capture_s": self.graph_capture_s,
            "init_engine_s": self.init_engine_s,
            "weights_to_ready_s": gap(self.weights_at_s, ready),
            "boot_s": gap(start, ready),
            "first_request_extra_s": self.first_request_extra_s,
        }

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["jit_kernels"] = list(self.jit_kernels)
        out["durations"] = self.durations()
        return out


def first_request_extra_s(latencies: Sequence[float]) -> float | None:
    """How much longer the first request took than the median of the later ones (the
    Triton kernels JIT-compiled on first use); ``None`` with fewer than two latencies."""
    if len(latencies) < 2:
        return None
    return round(float(latencies[0]) - statistics.median(float(x) for x in latencies[1:]), 3)


def compile_cache_from_log(text: str) -> str | None:
    """``hit`` / ``miss`` / ``mixed`` for vLLM's torch.compile cache, ``None`` when the log
    shows no compile at all (eager mode, or the log was cut before it)."""
    hit = bool(_COMPILE_HIT.search(text))
    miss = bool(_COMPILE_MISS.search(text))
    if hit and miss:
        return "mixed"
    return "hit" if hit else "miss" if miss else None


def _stamp(line: str, year: int) -> float | None:
    m = _STAMP.search(line)
    if not m:
        return None
    try:
        dt = datetime(year, int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
    except ValueError:
        return None
    return dt.timestamp()      # naive -> this machine's local zone, as vLLM wrote it


def _year(started_at: float | None) -> int:
    return time.localtime(started_at if started_at is not None else time.time()).tm_year


class _Scan:
    """One pass over the log, keeping the first occurrence of each stage."""

    def __init__(self, year: int) -> None:
        self.year = year
        self.first: float | None = None
        self.last: float | None = None
        self.found: dict[str, Any] = {}
        self.jit: list[str] = []

    def keep(self, key: str, value: Any) -> None:
        self.found.setdefault(key, value)

    def line(self, raw: str) -> None:
        line = _ANSI.sub("", raw.rstrip("\n"))
        prefix = _PREFIX.match(line)
        proc = prefix["proc"] if prefix else None
        t = _stamp(line, self.year)
        if t is not None:
            # Crossing New Year between start and this line: the month went backwards.
            if self.last is not None and t < self.last - 180 * 86400:
                self.year += 1
                t = _stamp(line, self.year)
            self.last = t
            if self.first is None:
                self.first = t
            if proc and proc.startswith("EngineCore"):
                self.keep("engine_core_at", t)
        self._messages(line, t)

    def _messages(self, line: str, t: float | None) -> None:
        if m := _WEIGHTS.search(line):
            self.keep("weights", (t, float(m[1]), float(m[2])))
        elif m := _COMPILE.search(line):
            self.found["compile_s"] = self.found.get("compile_s", 0.0) + float(m[1])
        elif m := _DYNAMO.search(line):
            self.keep("dynamo_s", float(m[1]))
        elif m := _PROFILE.search(line):
            self.keep("profile_s", float(m[1]))
        elif m := _CAPTURE.search(line):
            self.keep("capture", (float(m[1]), float(m[2])))
        elif m := _INIT.search(line):
            self.keep("init_s", float(m[1]))
        elif _READY.search(line) and t is not None:
            self.keep("ready_at", t)
        elif _STARTUP_DONE in line:
            self.keep("startup_complete", True)
        elif m := _JIT.search(line):
            self.jit.append(m[1])
        elif _SPAWN_FORCED in line:
            self.keep("spawn_forced", True)


def parse_boot_log(text: str, *, started_at: float | None = None,
                   health_at: float | None = None,
                   latencies: Sequence[float] | None = None) -> BootSplit:
    """The :class:`BootSplit` of one server log (API server and engine core interleaved,
    as vLLM writes them to one stdout). ``started_at``/``health_at``: epoch seconds of the
    process start and of the first ``/health`` 200, from the launcher."""
    scan = _Scan(_year(started_at))
    for raw in text.splitlines():
        scan.line(raw)
    f = scan.found
    origin = started_at if started_at is not None else scan.first
    # vLLM stamps whole seconds; against the launcher's exact clock a stage is placed in
    # the middle of its second (±0.5 s), between stamps the halves cancel.
    half = 0.5 if started_at is not None else 0.0

    def rel(t: float | None, exact: bool = False) -> float | None:
        if t is None or origin is None:
            return None
        return round(t + (0.0 if exact else half) - origin, 3)

    weights = f.get("weights")
    capture = f.get("capture")
    compile_s = f.get("compile_s")
    return BootSplit(
        started_at=started_at,
        api_server_at_s=rel(scan.first),
        engine_core_at_s=rel(f.get("engine_core_at")),
        weights_at_s=rel(weights[0]) if weights else None,
        weights_s=weights[2] if weights else None,
        weights_gib=weights[1] if weights else None,
        compile_s=round(compile_s, 3) if compile_s is not None else None,
        compile_cache=compile_cache_from_log(text),
        dynamo_s=f.get("dynamo_s"),
        profile_warmup_s=f.get("profile_s"),
        graph_capture_s=capture[0] if capture else None,
        graph_capture_gib=capture[1] if capture else None,
        init_engine_s=f.get("init_s"),
        ready_at_s=rel(f.get("ready_at")),
        startup_complete=bool(f.get("startup_complete")),
        health_at_s=rel(health_at, exact=True) if health_at is not None else None,
        first_request_extra_s=first_request_extra_s(latencies) if latencies else None,
        jit_kernels=tuple(dict.fromkeys(scan.jit)),
        engine_core_spawn_forced=bool(f.get("spawn_forced")),
    )
