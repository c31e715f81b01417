"""What the report says of other traffic: a cell's ``beside ≥N others`` and the summary's
"Other traffic" line, read off each record's ``traffic`` (the two /metrics scrapes
around its phase, ``harness/run/traffic.py``).

Bug B needs a lone request, so on a server the sweep does not own (``--url``) the line is
always there: how many phases ran beside other requests or could not be shown alone
(``not-lone`` where the answer matched: never counted clean), or that every phase ran
alone, which is what lets a clean cell there mean a lone request. On the sweep's own
servers it appears only when some phase ran beside another request. A ``--load`` record
is left to the "Load" section (its backgrounds are the point).
"""
from __future__ import annotations

from ..text.ghmarkdown import code, escape_text
from ..names.isolation import POLICIES
from ..names.verdict import NOT_LONE
from ..records.phase_record import PhaseRecord
from .model import ConfigData

__all__ = ["beside_phrase", "traffic_line"]


def beside_phrase(r: PhaseRecord) -> str:
    """``beside ≥6 others`` for a cell that ran beside other requests, ``alone not
    shown`` for a ``not-lone`` one /metrics could not clear, else ""."""
    t = r.traffic
    if r.load or not isinstance(t, dict):
        return ""
    if t.get("others"):
        return f"beside ≥{t['others']} others"
    return "alone not shown" if r.verdict == NOT_LONE else ""


def _owned(cd: ConfigData) -> bool:
    return all(POLICIES[i].lone_by_construction for i in cd.distinct("isolation")
               if i in POLICIES)


def traffic_line(cd: ConfigData) -> str:
    """``- **Other traffic:** 6 of 6 phases ran beside other requests …`` or ""."""
    recs = [r for r in cd.records if isinstance(r.traffic, dict) and not r.load]
    beside = [r for r in recs if r.traffic.get("others")]
    unknown = [r for r in recs if r.traffic.get("alone") is None]
    owned = _owned(cd)
    if not recs or (owned and not beside):
        return ""
    if not beside and not unknown:
        return (f"- **Other traffic:** none seen: each of the {len(recs)} phases ran alone "
                "(the server's `/metrics` before and after it: no other request running, "
                "waiting or finished between).")
    parts = []
    if beside:
        most = max(int(r.traffic["others"]) for r in beside)
        parts.append(f"{len(beside)} of {len(recs)} phases ran beside other requests (up "
                     f"to {most} at once, the server's `/metrics` before and after each)")
    if unknown:
        why = escape_text(str(unknown[0].traffic.get("missing") or "?"))
        parts.append(f"{len(unknown)} could not be shown to run alone ({why})")
    line = "- **Other traffic:** " + "; ".join(parts)
    if owned:
        return line + "."
    lone = len(recs) - len(beside) - len(unknown)
    return (line + f"; {lone} ran alone. Bug B needs a lone request: on a server the sweep "
            f"does not own, a matching answer that was not shown alone is {code(NOT_LONE)}, "
            "not a lone-request verdict, and is never counted clean.")
