"""One error tree for the harness: what went wrong decides the exit code.

Raised by validators and adapters while a sweep is being built (options, adapters,
backends, planning), never per data point: a data point that fails is a record with a
verdict, not an exception. ``cli.main`` maps every ``HarnessError`` to its exit code and
one line on stderr.
"""
from __future__ import annotations

__all__ = ["HarnessError", "UsageError", "CannotRun", "OutputFailed", "EXIT_USAGE",
           "EXIT_CANNOT_RUN", "EXIT_OUTPUT"]

EXIT_USAGE = 2
EXIT_CANNOT_RUN = 3
EXIT_OUTPUT = 4


class HarnessError(Exception):
    """Base of the harness's own errors; ``exit_code`` and ``prefix`` say how ``sweep``
    reports it."""

    exit_code = 1
    prefix = "error"


class UsageError(HarnessError, ValueError):
    """A user mistake on the command line: one line, exit code 2."""

    exit_code = EXIT_USAGE
    prefix = "error"


class CannotRun(HarnessError, RuntimeError):
    """The sweep could not run at all (no cluster, no tokenizer, a probe that did not
    boot): exit code 3."""

    exit_code = EXIT_CANNOT_RUN
    prefix = "cannot run"


class OutputFailed(HarnessError, RuntimeError):
    """The sweep ran and its records are on disk, but an output could not be written or
    posted (the report file, JUnit, the step summary, a GitHub comment): exit code 4, with
    the report's path so nothing is lost."""

    exit_code = EXIT_OUTPUT
    prefix = "output failed"
