"""The report's timing section: where a run's wall time went, the passes of an auto run
against an all-fresh estimate, and the median boot split of its servers (vLLM: read from
each server's log by engine/vllm/bootlog, against the harness's own start time).

A median boot is over the servers that booted, each counted once, read from the records
``server_boot`` (its log names the server): a reset pass boots one server per
configuration and runs every point on it, so the manifest's per-point median
(``median_boot_s``) is 0 there. Records without ``server_boot`` fall back to that per-point
median, and the row says so.

Rendered only for manifests that carry a boot split or auto passes, so reports of older
runs (e.g. reports/h200/regenerate.sh) render byte for byte as before."""
from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from ..text.ghmarkdown import details, escape_text, table
from ..names.isolation import AUTO_PASSES
from ..records.phase_record import PhaseRecord
from ..records.run_timing import RunTiming
from ..records.manifest import RunManifest

__all__ = ["STAGE_NAMES", "booted_servers", "render_timing"]

STAGE_NAMES = {
    "python_start_and_imports_s": "process start → API server's first line (Python start-up, imports)",
    "api_server_to_engine_core_s": "→ engine core's first line",
    "engine_core_to_weights_s": "→ weights loaded",
    "compile_s": "torch.compile (engine's figure)",
    "graph_capture_s": "graph capture (engine's figure)",
    "init_engine_s": "engine init: profile, KV cache, warm-up (engine's figure)",
    "weights_to_ready_s": "weights loaded → ready (/health 200)",
    "boot_s": "process start → ready, from the log",
    "harness_boot_s": "process start → ready, the harness's clock",
    "first_request_extra_s": "first request's extra latency (JIT)",
}


def _fmt(v: Any) -> str:
    return "–" if v is None else f"{v:g}" if isinstance(v, (int, float)) else escape_text(str(v))


def booted_servers(records: Iterable[PhaseRecord], run_id: str | None,
                   isolation: str | None = None) -> dict[str, float]:
    """Server log → boot seconds of every server of ``run_id`` that booted (of one auto
    pass with ``isolation``), from the records' ``server_boot``."""
    out: dict[str, float] = {}
    for r in records:
        boot = r.boot
        if (r.run_id != run_id or boot is None or not boot.log
                or (isolation is not None and r.isolation != isolation)):
            continue
        if isinstance(boot.boot_s, (int, float)):
            out.setdefault(boot.log, float(boot.boot_s))
    return out


def _median_boot(servers: dict[str, float], per_point: Any) -> str:
    """``4 servers booted, median boot 270.8 s per server``, or the manifest's per-point
    median, named as such, when the records do not say which server booted."""
    if servers:
        n = len(servers)
        return (f"{n} server{'s' if n != 1 else ''} booted, median boot "
                f"{_fmt(round(statistics.median(servers.values()), 2))} s per server")
    return f"median boot {_fmt(per_point)} s per point (0 on a reused server)"


def _run_rows(m: RunManifest, t: RunTiming, records: list[PhaseRecord]) -> list[list[str]]:
    rid = escape_text(m.run_id or "?")
    run_servers = booted_servers(records, m.run_id)
    wall = (f"{_fmt(t.wall_s)} s over {_fmt(t.slots)} slot(s), "
            f"{_fmt(t.points)} points, {_median_boot(run_servers, t.median_boot_s)}")
    rows = [[f"{rid}: wall", wall]]
    for name in AUTO_PASSES:
        p = t.passes.get(name)
        if p:
            servers = booted_servers(records, m.run_id, name) if run_servers else {}
            n = p.points
            value = (f"{_fmt(n)} point{'' if n == 1 else 's'}, {_fmt(p.sum_boot_s)} s "
                     f"booting in all, {_median_boot(servers, p.median_boot_s)}, median "
                     f"requests {_fmt(p.median_requests_s)} s")
            if p.restored_points:
                value += (f", {_fmt(p.restored_points)} restored, median restore "
                          f"{_fmt(p.median_restore_s)} s per point")
            rows.append([f"{rid}: {name} pass", value])
    if t.all_fresh_estimate_s:
        rows.append([f"{rid}: all-fresh estimate",
                     f"{_fmt(t.all_fresh_estimate_s)} s (every reset point at the "
                     f"median fresh point); this run took {_fmt(t.ratio_to_all_fresh)}"
                     " of it"])
    return rows


def _boot_rows(m: RunManifest, t: RunTiming) -> list[list[str]]:
    b = t.boot_split
    if b is None:
        return []
    rid = escape_text(m.run_id or "?")
    how = ", ".join(f"{n} {escape_text(k)}" for k, n in sorted((b.launchers or {}).items()))
    rows = [[f"{rid}: servers", f"{_fmt(b.servers)} ({how})"]]
    for reason in b.fallback_reasons or ():
        rows.append([f"{rid}: plain fallback", escape_text(reason, limit=200)])
    if b.compile_cache:
        rows.append([f"{rid}: compile cache", ", ".join(
            f"{escape_text(k)} {n}" for k, n in sorted(b.compile_cache.items()))])
    for stage, v in (b.median_s or {}).items():
        rows.append([f"{rid}: median {escape_text(STAGE_NAMES.get(stage, stage))}", f"{_fmt(v)} s"])
    return rows


def render_timing(manifests: list[RunManifest], records: list[PhaseRecord] | None = None) -> str:
    """``records``: the report's records, for the servers each run booted."""
    shown = [(m, t) for m, t in ((m, m.timing or RunTiming()) for m in manifests)
             if t.boot_split or t.passes or t.all_fresh_estimate_s is not None
             or t.ratio_to_all_fresh is not None]
    if not shown:
        return ""
    rows: list[list[str]] = []
    for m, t in shown:
        rows += _run_rows(m, t, records or []) + _boot_rows(m, t)
    return "## Timing\n\n" + details(f"Where the wall time went ({len(rows)} rows)",
                                      table(["", "value"], rows))
