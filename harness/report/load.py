"""The report's "Load" section (``--load N``, docs/shapes.md): one row per measured cell
run beside background conversations, with its load column: what ran beside it, read
back from the server (the final chunk's batch from its scheduler log where it writes
one, ``vllm:num_requests_running`` before and after the request otherwise).

Empty for runs without load, so every report of a lone-request run reads as before.
"""
from __future__ import annotations

from ..text.ghmarkdown import code, escape_text, table
from ..text.phrase import plural
from ..names.phase import phase_key

__all__ = ["render_load", "load_cell"]


def load_cell(load: dict | None) -> str:
    """``4 steady: chunk 4 beside 4 decode (20 tokens, FULL)`` or what /metrics said."""
    if not load:
        return "–"
    head = f"{load.get('n')} {escape_text(str(load.get('mode') or ''))}"
    b = load.get("beside")
    if b:
        body = (f"chunk {b.get('final_chunk')} beside {b.get('decode_reqs')} decode, "
                f"{max(0, int(b.get('prefill_reqs') or 1) - 1)} prefill "
                f"({b.get('batch_tokens')} tokens, {code(str(b.get('dispatch')))})")
    else:
        body = (f"running {load.get('running_before', '?')} before / "
                f"{load.get('running_after', '?')} after (no scheduler log)")
    if load.get("preemptions"):
        body += f", {load['preemptions']} preemption(s)"
    if load.get("measured_preempted"):
        body += f" ({load['measured_preempted']} of the measured request)"
    if load.get("restarts"):
        body += f", {load['restarts']} background restart(s)"
    if load.get("ended"):
        body += f", {load['ended']} background(s) ended before it returned"
    if not load.get("proven"):
        body += ", **not proven beside decode steps**"
    return f"{head}: {body}"


def render_load(configs) -> str:
    rows = []
    for cd in configs:
        for r in sorted(cd.records, key=lambda r: (r.residue or 0, phase_key(r.phase or ""))):
            if not r.load:
                continue
            rows.append([code(cd.label) if len(configs) > 1 else "",
                         str(r.residue), escape_text(r.phase or ""),
                         str(r.target_len), escape_text(r.verdict or ""),
                         load_cell(r.load)])
    if not rows:
        return ""
    header = ["configuration", "residue", "phase", "length", "verdict", "load"]
    if len(configs) <= 1:
        header, rows = header[1:], [row[1:] for row in rows]
    proven = sum(1 for cd in configs for r in cd.records if (r.load or {}).get("proven"))
    return ("## Load\n\nEach measured request ran beside background conversations "
            "(`--load`); the load column says what ran beside it, from the server's own "
            f"log or /metrics ({proven} of {plural(len(rows), 'cell')} proven beside decode "
            "steps).\n\n"
            + table(header, rows))
