"""Records grouped by the node they ran on (any backend: every record has ``node``).

A broken residue is a property of the configuration; a node whose points alone fail is a
property of the machine (a bad GPU, a full disk, a flaky network). On a multi-node sweep
the report shows one row per node so the two cannot be confused.
"""
from __future__ import annotations

from ..text.ghmarkdown import bold, code, escape_text, table
from ..records.phase_record import PhaseRecord
from ..records.recordkeys import by_node
from ..names.verdict import CLEAN

__all__ = ["by_node", "render_nodes"]


def render_nodes(records: list[PhaseRecord]) -> str:
    """A ``## By node`` section, or "" when every record ran on one node (nothing to say).

    Columns: node, data points, phase cells, cells not ok (by verdict), points retried
    after their node or worker was lost (``attempt`` 2, a key of the record's ``extra``)."""
    nodes = by_node(records)
    if len(nodes) < 2:
        return ""
    points: dict[str, set] = {}
    retried: dict[str, set] = {}
    for r in records:
        node = str(r.node or "?")
        key = (r.run_id, r.config_id, r.case_id, r.residue)
        points.setdefault(node, set()).add(key)
        if (r.extra.get("attempt") or 1) > 1:
            retried.setdefault(node, set()).add(key)
    rows = []
    for node, counts in nodes.items():
        bad = {v: n for v, n in counts.items() if v not in CLEAN}
        bad_text = ", ".join(f"{escape_text(v)} {n}" for v, n in sorted(bad.items()))
        rows.append([code(node), str(len(points[node])), str(sum(counts.values())),
                     bold(bad_text) if bad else "0", str(len(retried.get(node, ())))])
    return ("## By node\n\n" + table(["node", "points", "cells", "not ok", "retried here"],
                                     rows, align=["left", "right", "right", "left", "right"]))
