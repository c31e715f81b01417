"""The verdicts a record can carry and what each means, one row of ``VERDICT_TABLE`` each.

A verdict's row says what it is (judged, tested, a bug, a failure, explained,
provisional) and how a report cell shows it; the groups the gate, bisect, the report,
auto, explain and the matrix reference ask (``JUDGED``, ``UNTESTED``, ``BUG_VERDICTS``,
...) are read off the table, and ``VerdictName`` and ``SEVERITY``'s check follow, so
adding a verdict is one row here and its rank in ``SEVERITY`` (docs/architecture.md).
A leaf: imports nothing of the harness (``harness/names/__init__.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable

__all__ = ["Verdict", "VERDICT_TABLE", "VERDICTS", "VerdictName", "UNJUDGED", "NOT_LONE",
           "SEVERITY", "BUG_VERDICTS", "CLEAN", "JUDGED", "UNTESTED", "EXPLAINED", "OPEN",
           "NOT_FAILED", "SERVER_LOGGED", "UNANSWERED", "worst", "verdict_info"]


@dataclass(frozen=True)
class Verdict:
    name: str
    judged: bool       # an answer compared with a reference (a --baseline cell that counts)
    tested: bool       # says something about the build (--bisect: else the point is untested)
    bug: bool          # a wrong answer (the Bug B family: broken, diverged)
    failed: bool       # counts against the point (the gate, auto's fresh confirmation)
    explained: bool    # `sweep explain` reruns a cell with it
    open: bool         # provisional: a matrix reference (first, consensus) may replace it
    cell: str          # how a report cell shows it: "answer" (n/N and what went wrong),
                       # "word" (the verdict alone), "gist" (the boot failure's gist),
                       # "reason" (the record's reason)
    logged: bool = False   # the server's log says why (the report quotes its gist)

    @property
    def clean(self) -> bool:
        """Judged and not counted against the point: a cell with it is clean (``CLEAN``)."""
        return self.judged and not self.failed


# In VERDICTS order; unjudged: an answer with nothing to compare it with (the cold phase
# under --reference cold, a prompt the matrix reference could not answer): not
# collapsed, and not proven ok. not-lone: see its row.
VERDICT_TABLE: tuple[Verdict, ...] = (
    #        name        judged tested  bug    failed explained open   cell
    Verdict("ok",        True,  True,  False, False, False, False, "answer"),
    Verdict("diverged",  True,  True,  True,  True,  True,  False, "answer"),
    Verdict("broken",    True,  True,  True,  True,  True,  False, "answer"),
    Verdict("crash",     False, True,  False, True,  True,  False, "word", logged=True),
    Verdict("boot-fail", False, False, False, True,  False, False, "gist", logged=True),
    Verdict("timeout",   False, True,  False, True,  True,  False, "word", logged=True),
    Verdict("invalid",   False, False, False, True,  False, False, "reason"),
    # matched its reference on a server the sweep does not own (--url), but ran beside
    # other requests, or /metrics could not show it ran alone (run/traffic.py): Bug B
    # breaks a lone request, so this answer says nothing about it (not judged, not
    # tested) and is not a pass either (failed): the cell still shows the answer
    Verdict("not-lone",  False, False, False, True,  False, False, "answer"),
    Verdict("infra",     False, False, False, True,  False, False, "reason"),
    Verdict("unjudged",  False, False, False, False, False, True,  "answer"),
)
_BY_NAME = {v.name: v for v in VERDICT_TABLE}
# A verdict as a value, one member per row: VerdictName.OK == "ok", and a record, manifest or
# report that holds a member writes the word itself (a StrEnum), so comparisons name the
# member (or, better, ask the row: ``verdict_info(v).bug``, ``v in CLEAN``), never the string.
VerdictName = StrEnum("VerdictName", [(v.name.upper().replace("-", "_"), v.name)
                                      for v in VERDICT_TABLE], module=__name__)
VERDICTS = tuple(_BY_NAME)
# Worst first: a point's status is the worst verdict of its phases.
SEVERITY = ("infra", "boot-fail", "crash", "timeout", "broken", "diverged", "invalid", "not-lone",
            "unjudged", "ok")
BUG_VERDICTS = frozenset(v.name for v in VERDICT_TABLE if v.bug)
JUDGED = frozenset(v.name for v in VERDICT_TABLE if v.judged)
UNTESTED = frozenset(v.name for v in VERDICT_TABLE if not v.tested)
EXPLAINED = frozenset(v.name for v in VERDICT_TABLE if v.explained)
OPEN = frozenset(v.name for v in VERDICT_TABLE if v.open)
NOT_FAILED = frozenset(v.name for v in VERDICT_TABLE if not v.failed)
SERVER_LOGGED = frozenset(v.name for v in VERDICT_TABLE if v.logged)
# no answer worth quoting: the cell shows a failure's gist or reason instead
UNANSWERED = frozenset(v.name for v in VERDICT_TABLE if v.cell in ("gist", "reason"))
CLEAN = frozenset(v.name for v in VERDICT_TABLE if v.clean)
UNJUDGED = VerdictName.UNJUDGED
NOT_LONE = VerdictName.NOT_LONE

assert set(SEVERITY) == set(VERDICTS)


def verdict_info(name: str) -> Verdict | None:
    """The row of a verdict (None for a word no record should carry)."""
    return _BY_NAME.get(name)


def worst(verdicts: Iterable[str]) -> str:
    vs = list(verdicts)
    if not vs:
        return "ok"
    return min(vs, key=lambda v: SEVERITY.index(v) if v in SEVERITY else 0)
