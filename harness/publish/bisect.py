"""``sweep --bisect``: the sweep's exit code as ``git bisect run`` reads it.

git bisect run takes 0 as good, 125 as "cannot test this commit" (skip), any other code
from 1 to 127 as bad, and a code above 127 as "abort the bisect". So under ``--bisect``:

- 1 when a judged cell is not ok (broken, diverged, crash, timeout: the build misbehaved);
- 125 when nothing says the build is bad and some point was not tested: a boot-fail, an
  infra loss or an invalid point (a good verdict needs every point tested, or a build whose
  server does not boot at the broken residue would pass), an ``unjudged`` answer that no
  other answer was judged against, and when the sweep could not run at all (exit 3) or the
  harness itself failed (an unexpected exception: the build was not judged);
- an ``unjudged`` answer that another answer of the same prompt was judged against is
  tested: the cold answer under ``--reference cold`` (the hits are judged against it) and
  the first configuration's under ``--reference first``. What the reference cannot see
  (a corruption identical in every phase under ``cold``) it cannot see here either;
- 0 only when every point was tested and every cell is ok;
- a usage error (exit 2 elsewhere) becomes 128: the command line is wrong, not the commit,
  and a 2 would make git call the commit bad. Interrupted (130) already aborts.
"""
from __future__ import annotations

import sys
from collections import Counter
from typing import Iterable

from ..errors import EXIT_CANNOT_RUN, EXIT_USAGE, BisectExit, ExitCode
from ..records.phase_record import PhaseRecord
from ..records.recordkeys import cell_key, reference_cells
from ..names.verdict import CLEAN, UNTESTED

__all__ = ["UNTESTED", "EXIT_GOOD", "EXIT_BAD", "EXIT_SKIP", "EXIT_ABORT_BISECT",
           "bisect_exit_code", "bisect_verdict_line", "map_exit", "internal_error"]

EXIT_GOOD, EXIT_BAD, EXIT_SKIP, EXIT_ABORT_BISECT = (BisectExit.GOOD, BisectExit.BAD,
                                                   BisectExit.SKIP, BisectExit.ABORT)
# UNTESTED (harness.names.verdict): verdicts that say the point was not tested (not that the
# build misbehaved); unjudged too, unless another answer was judged against it (``_untested``).


def _untested(recs: list[PhaseRecord]) -> list[PhaseRecord]:
    """The records that say their point was not tested: UNTESTED verdicts, less the
    reference cells (``recordkeys.reference_cells``: the unjudged answers some judged
    answer of the same prompt was judged against; the gate and the report ask the same)."""
    refs = reference_cells(recs)
    return [r for r in recs if r.verdict in UNTESTED and cell_key(r) not in refs]


def bisect_exit_code(records: Iterable[PhaseRecord]) -> int:
    recs = list(records)
    verdicts = Counter(r.verdict for r in recs)
    if any(v not in UNTESTED and v not in CLEAN for v in verdicts):
        return EXIT_BAD
    if not verdicts or _untested(recs):
        return EXIT_SKIP
    return EXIT_GOOD


def bisect_verdict_line(records: Iterable[PhaseRecord]) -> str:
    """One stderr line: what the bisect exit code rests on."""
    recs = list(records)
    code = bisect_exit_code(recs)
    counts = Counter(r.verdict for r in recs)
    said = " ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "no records"
    word = {EXIT_GOOD: "good", EXIT_BAD: "bad", EXIT_SKIP: "skip (untestable)"}[code]
    return f"bisect: {word}, exit {code} ({said})"


def internal_error(bisecting: bool, kill_servers) -> int:
    """An unexpected exception (called in its ``except``): re-raised outside ``--bisect``;
    under it the traceback, no server left, and 125: the harness failed, the build was
    not judged (git reads 1 as bad)."""
    if not bisecting:   # command/cli.main read --bisect off the command line
        raise
    import traceback
    traceback.print_exc()
    kill_servers()
    print(f"sweep: internal error under --bisect: exit {EXIT_SKIP} (this commit untested)",
          file=sys.stderr)
    return EXIT_SKIP


def map_exit(code: int) -> int:
    """A sweep exit code that is not a measurement, in git bisect's terms."""
    if code in (EXIT_USAGE, ExitCode.NO_SPACE):   # a full disk fails every commit alike
        return EXIT_ABORT_BISECT
    if code == EXIT_CANNOT_RUN:
        return EXIT_SKIP
    return code
