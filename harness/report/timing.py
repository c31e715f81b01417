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

from ..ghmarkdown import escape_text, table
from ..isolation import AUTO_PASSES
from ..run.records import PhaseRecord

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
        boot = r.server_boot
        if (r.run_id != run_id or not isinstance(boot, dict) or not boot.get("log")
                or (isolation is not None and r.isolation != isolation)):
            continue
        secs = boot.get("boot_s", r.boot_s)
        if isinstance(secs, (int, float)):
            out.setdefault(boot["log"], float(secs))
    return out


def _median_boot(servers: dict[str, float], per_point: Any) -> str:
    """``4 servers booted, median boot 270.8 s per server``, or the manifest's per-point
    median, named as such, when the records do not say which server booted."""
    if servers:
        n = len(servers)
        return (f"{n} server{'s' if n != 1 else ''} booted, median boot "
                f"{_fmt(round(statistics.median(servers.values()), 2))} s per server")
    return f"median boot {_fmt(per_point)} s per point (0 on a reused server)"


def _run_rows(m: dict, records: list[PhaseRecord]) -> list[list[str]]:
    t = m.get("timing") or {}
    rid = escape_text(m.get("run_id") or "?")
    run_servers = booted_servers(records, m.get("run_id"))
    wall = (f"{_fmt(t.get('wall_s'))} s over {_fmt(t.get('slots'))} slot(s), "
            f"{_fmt(t.get('points'))} points, {_median_boot(run_servers, t.get('median_boot_s'))}")
    rows = [[f"{rid}: wall", wall]]
    passes = t.get("passes") or {}
    for name in AUTO_PASSES:
        p = passes.get(name)
        if p:
            servers = booted_servers(records, m.get("run_id"), name) if run_servers else {}
            n = p.get("points")
            value = (f"{_fmt(n)} point{'' if n == 1 else 's'}, {_fmt(p.get('sum_boot_s'))} s "
                     f"booting in all, {_median_boot(servers, p.get('median_boot_s'))}, median "
                     f"requests {_fmt(p.get('median_requests_s'))} s")
            if p.get("restored_points"):
                value += (f", {_fmt(p['restored_points'])} restored, median restore "
                          f"{_fmt(p.get('median_restore_s'))} s per point")
            rows.append([f"{rid}: {name} pass", value])
    if passes.get("all_fresh_estimate_s"):
        rows.append([f"{rid}: all-fresh estimate",
                     f"{_fmt(passes['all_fresh_estimate_s'])} s (every reset point at the "
                     f"median fresh point); this run took {_fmt(passes.get('ratio_to_all_fresh'))}"
                     " of it"])
    return rows


def _boot_rows(m: dict) -> list[list[str]]:
    b = (m.get("timing") or {}).get("boot_split") or {}
    if not b:
        return []
    rid = escape_text(m.get("run_id") or "?")
    how = ", ".join(f"{n} {escape_text(k)}" for k, n in sorted((b.get("launchers") or {}).items()))
    rows = [[f"{rid}: servers", f"{_fmt(b.get('servers'))} ({how})"]]
    for reason in b.get("fallback_reasons") or ():
        rows.append([f"{rid}: plain fallback", escape_text(reason, limit=200)])
    if b.get("compile_cache"):
        rows.append([f"{rid}: compile cache", ", ".join(
            f"{escape_text(k)} {n}" for k, n in sorted(b["compile_cache"].items()))])
    for stage, v in (b.get("median_s") or {}).items():
        rows.append([f"{rid}: median {escape_text(STAGE_NAMES.get(stage, stage))}", f"{_fmt(v)} s"])
    return rows


def render_timing(manifests: list[dict], records: list[PhaseRecord] | None = None) -> str:
    """``records``: the report's records, for the servers each run booted."""
    shown = [m for m in manifests if (m.get("timing") or {}).get("boot_split")
             or (m.get("timing") or {}).get("passes")]
    if not shown:
        return ""
    rows: list[list[str]] = []
    for m in shown:
        rows += _run_rows(m, records or []) + _boot_rows(m)
    return "## Timing\n\n" + table(["", "value"], rows)
