"""One error tree for the harness: what went wrong decides the exit code.

Every exception class of ``harness/`` derives from ``HarnessError`` and carries its exit
code (``tests/harness/test_layout.py`` checks both). The ones with a code are raised while a
sweep is being built or finished (options, adapters, backends, planning, outputs), never
per data point: ``cli.main`` maps each to its exit code and one line on stderr, by the base
class, once. A ``HandledError`` has none: it is caught where it is raised (a data point
that fails is a record with a verdict; a plan, a post or a file that fails becomes one of
the others, with its context).
"""
from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitCode", "BisectExit", "PostExit", "HarnessError", "HandledError", "UsageError", "CannotRun", "StoreError", "OutputFailed",
           "NoSpace",
           "EXIT_USAGE", "EXIT_CANNOT_RUN", "EXIT_OUTPUT"]


class ExitCode(IntEnum):
    """``sweep``'s exit codes (``--bisect`` maps them to git bisect's: ``harness.publish.bisect``)."""
    OK = 0             # every point ok, or the gate passed
    NOT_OK = 1         # a point is not ok, or a regression against --baseline
    USAGE = 2          # a usage or configuration error
    CANNOT_RUN = 3     # the sweep could not run at all
    OUTPUT = 4         # the sweep ran, an output could not be written or posted
    NO_SPACE = 5       # the disk filled up mid-sweep: every record so far kept, --resume goes on
    INTERRUPTED = 130  # SIGINT / SIGTERM: every finished record on disk, --resume goes on


class BisectExit(IntEnum):
    """``sweep --bisect``: the codes ``git bisect run`` reads (``harness.publish.bisect``)."""
    GOOD = 0
    BAD = 1            # 1..127 but 125: the commit is bad
    SKIP = 125         # this commit cannot be tested
    ABORT = 128        # above 127: abort the bisect (a usage error, not the commit)


class PostExit(IntEnum):
    """``python -m harness.publish.github_rest``: posting a report as a GitHub comment. Numbered
    apart from ``ExitCode`` (a 3 or a 4 there means the sweep could not run or an output
    failed) so that a script reading either cannot mistake one for the other."""
    OK = 0
    USAGE = 2          # bad arguments, unreadable report, no token
    AUTH = 10          # the token was refused (401, 403, rate limit)
    NOT_FOUND = 11     # 404: no such repository or issue, or the token cannot see it
    REJECTED = 12      # 422 or another HTTP error
    NETWORK = 13       # GitHub could not be reached


EXIT_USAGE = ExitCode.USAGE
EXIT_CANNOT_RUN = ExitCode.CANNOT_RUN
EXIT_OUTPUT = ExitCode.OUTPUT


class HarnessError(Exception):
    """Base of the harness's own errors; ``exit_code`` and ``prefix`` say how ``sweep``
    reports it (``exit_code`` None: a ``HandledError``)."""

    exit_code: int | None = 1
    prefix = "error"


class HandledError(HarnessError):
    """Caught where it is raised: a point's failure (a request, a boot, a restore, the load
    beside it) becomes the point's record; a step's becomes the error the user sees, with
    its context (``CaseTooLong`` -> ``UsageError``, ``PostError`` and ``GateError`` ->
    ``OutputFailed``, ``RecordFileError`` -> ``StoreError``). No exit code of its own: one
    that reaches ``cli.main`` is a harness bug, re-raised like any other exception (125
    under ``--bisect``). The shared planner's errors (``engine.prompts``: ``PlanError``,
    ``TemplateError``) are ``RuntimeError``s, engine/ importing nothing of harness/; the
    sweep maps them where it plans (``residue_sweep``: ``UsageError``, ``CannotRun``)."""

    exit_code = None


class UsageError(HarnessError, ValueError):
    """A user mistake on the command line: one line, exit code 2."""

    exit_code = EXIT_USAGE
    prefix = "error"


class CannotRun(HarnessError, RuntimeError):
    """The sweep could not run at all (no cluster, no tokenizer, a probe that did not
    boot): exit code 3."""

    exit_code = EXIT_CANNOT_RUN
    prefix = "cannot run"


class StoreError(CannotRun):
    """A results file, run id or run manifest that cannot be read: the sweep cannot run
    (exit 3), unless a caller says it as a usage error (a file the user named: report,
    compare, --baseline). Raised by ``records/store.py`` and ``records/manifest.py``."""


class OutputFailed(HarnessError, RuntimeError):
    """The sweep ran and its records are on disk, but an output could not be written or
    posted (the report file, JUnit, the step summary, a GitHub comment): exit code 4, with
    the report's path so nothing is lost."""

    exit_code = EXIT_OUTPUT
    prefix = "output failed"


class NoSpace(HarnessError, OSError):
    """The results could not be written (the disk is full, a quota, a read-only remount)
    mid-sweep: every record written before is whole (the store cuts off a half-written
    line), the servers are stopped, and ``--resume`` continues once there is room: exit 5."""

    exit_code = ExitCode.NO_SPACE
    prefix = "cannot write the results"
