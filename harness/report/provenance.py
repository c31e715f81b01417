"""The report's provenance table: which runs, engine and versions, patch set, slots and
nodes, isolation (and how each restore was proven), poison, dates: what was measured, on
which engine, and what it cannot see."""
from __future__ import annotations

from ..records.phase_record import PhaseRecord
from ..records.same_compile import gpu_models
from ..records.manifest import RunManifest
from ..names.isolation import IsolationName, POLICIES
from ..text.ghmarkdown import bold, cap, code, details, escape_text, table
from .model import ConfigData
from .restore import poison_summary, restore_summary

__all__ = ["render_provenance"]


def render_provenance(configs: list[ConfigData], records: list[PhaseRecord],
                      manifests: list[RunManifest], superseded: int) -> str:
    rows = _record_rows(configs, records, manifests)
    for m in manifests:
        rows += _manifest_rows(m, configs)
    notes = _notes(_distinct(records, "isolation"), superseded)
    text = "## Provenance\n\n" + details(f"Runs, engine, versions, slots, isolation, command "
                                          f"({len(rows)} rows)", table(["", "value"], rows))
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return text


def _distinct(records: list[PhaseRecord], key: str) -> list:
    out = []
    for r in records:
        v = getattr(r, key)
        if v not in (None, "") and v not in out:
            out.append(v)
    return out


def _join(vals: list, as_code: bool = False) -> str:
    if not vals:
        return "–"
    return ", ".join(code(str(v)) if as_code else escape_text(str(v)) for v in vals)


def _date(records: list[PhaseRecord], manifests: list[RunManifest]) -> str:
    """The runs' first start → last end (the manifests', else the records' starts)."""
    starts = sorted(x for x in _distinct(records, "started_at"))
    m_starts = sorted(m.started_at for m in manifests if m.started_at)
    m_ends = sorted(m.ended_at for m in manifests if m.ended_at)
    first = m_starts[0] if m_starts else (starts[0] if starts else None)
    last = m_ends[-1] if m_ends else (starts[-1] if starts else None)
    if not first:
        return "–"
    return escape_text(first) + (f" → {escape_text(last)}" if last and last != first else "")


def _record_rows(configs: list[ConfigData], records: list[PhaseRecord],
                 manifests: list[RunManifest]) -> list[list[str]]:
    def distinct(key: str) -> list:
        return _distinct(records, key)

    engines = []
    for r in records:
        e = f"{r.engine or '?'} {r.engine_version or ''}".strip()
        if e not in engines:
            engines.append(e)
    return [
        ["run", _join(distinct("run_id"), True)],
        ["date", _date(records, manifests)],
        ["engine", _join(engines)],
        ["model", _join(distinct("model"))],
        ["patch set", _join(distinct("patches"), True)],
        ["slot (GPU / CPU)", _join(distinct("slot"))],
        *([["GPU", _join(gpus)]] if (gpus := _gpus(records)) else []),
        ["node", _join(distinct("node"))],
        ["isolation", _join(distinct("isolation"))],
        *([["restore", restored]] if (restored := restore_summary(records)) else []),
        *([["poison", poisoned]] if (poisoned := poison_summary(records)) else []),
        ["reference", _join(distinct("reference"))],
        ["modulus", _join(sorted({c.modulus for c in configs}))],
        *([["modulus: why", _join(distinct("modulus_why"))]] if distinct("modulus_why") else []),
        ["harness", _join(distinct("harness_version"), True)],
    ]


def _gpus(records: list[PhaseRecord]) -> list[str]:
    """The GPUs the records name (issue 48: a broken cell's bytes depend on them)."""
    return list(dict.fromkeys(g for r in records if (g := gpu_models(r))))


def _manifest_rows(m: RunManifest, configs: list[ConfigData]) -> list[list[str]]:
    """A run's command, what it sampled, and whether it finished."""
    rows, run = [], escape_text(m.run_id or "?")
    if m.command:
        rows.append([f"command ({run})", code(cap(str(m.command), 300))])
    sampled = m.sampled
    if isinstance(sampled, dict):
        labels = {c.config_id: c.label for c in configs}
        for cid, note in sampled.items():
            if note:
                rows.append([f"sampled ({code(labels.get(cid, cid))})", escape_text(str(note))])
    elif sampled:
        rows.append(["sampled", escape_text(str(sampled))])
    if m.did_not_finish:
        rows.append(["interrupted", bold(f"run {run} did not finish")])
    if m.exit_code not in (None, 0):
        rows.append([f"exit code ({run})", escape_text(str(m.exit_code))])
    return rows


def _notes(iso: list, superseded: int) -> list[str]:
    notes = []
    weaker = [i for i in iso if not (i in POLICIES and POLICIES[i].as_fresh)]
    if weaker:
        notes.append(f"Isolation {_join(weaker)}: weaker than one fresh "
                     "server per data point; blocks from earlier requests can leak into later "
                     "ones.")
    if IsolationName.RESTORE in iso:
        notes.append("Isolation restore: one server per configuration, returned to its "
                     "just-booted state between points (the `restore` row says how, and what "
                     "it cost); trusted where fresh servers agree with it (`--isolation auto` "
                     "confirms it, docs/isolation.md).")
    if superseded:
        notes.append(f"{superseded} older record(s) of the same cell were superseded by newer "
                     "ones (latest `started_at` wins).")
    return notes
