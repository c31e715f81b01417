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
from typing import Any, Iterable

from ..errors import EXIT_CANNOT_RUN, EXIT_USAGE, BisectExit, ExitCode
from ..records.recordkeys import document_of, value_of
from ..judge.vocabulary import OPEN, UNTESTED
from ..judge.vocabulary import CLEAN

__all__ = ["UNTESTED", "EXIT_GOOD", "EXIT_BAD", "EXIT_SKIP", "EXIT_ABORT_BISECT",
           "bisect_exit_code", "bisect_verdict_line", "map_exit", "internal_error"]

EXIT_GOOD, EXIT_BAD, EXIT_SKIP, EXIT_ABORT_BISECT = (BisectExit.GOOD, BisectExit.BAD,
                                                   BisectExit.SKIP, BisectExit.ABORT)
# UNTESTED (harness.judge.vocabulary): verdicts that say the point was not tested (not that the
# build misbehaved); unjudged too, unless another answer was judged against it (``_untested``).


def _prompt_of(r: Any, sha: str | None) -> tuple:
    return (value_of(r, "residue"), document_of(r), value_of(r, "case_id"), sha)


def _untested(recs: list[Any]) -> list[Any]:
    """The records that say their point was not tested: UNTESTED verdicts, less the
    unjudged answers some judged answer of the same prompt used as its reference."""
    used = {_prompt_of(r, value_of(r, "reference_sha1")) for r in recs
            if value_of(r, "verdict") not in UNTESTED and value_of(r, "reference_sha1")}
    return [r for r in recs if value_of(r, "verdict") in UNTESTED
            and not (value_of(r, "verdict") in OPEN
                     and _prompt_of(r, value_of(r, "sha1")) in used)]


def bisect_exit_code(records: Iterable[Any]) -> int:
    recs = list(records)
    verdicts = Counter(value_of(r, "verdict") for r in recs)
    if any(v not in UNTESTED and v not in CLEAN for v in verdicts):
        return EXIT_BAD
    if not verdicts or _untested(recs):
        return EXIT_SKIP
    return EXIT_GOOD


def bisect_verdict_line(records: Iterable[Any]) -> str:
    """One stderr line: what the bisect exit code rests on."""
    recs = list(records)
    code = bisect_exit_code(recs)
    counts = Counter(value_of(r, "verdict") for r in recs)
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
