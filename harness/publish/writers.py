"""Where a finished sweep's results go besides the results file: output writers.

Each writer meets one small interface (``wanted(opts)``, ``write(output)`` returning
the lines ``sweep`` says on stderr) and is named in ``WRITERS``, which ``cli`` runs in
order after the report is rendered. Adding an output format: one class here and one
entry in ``WRITERS`` (docs/architecture.md). The formats themselves live in
``harness.report`` (markdown) and ``harness.publish.gate`` (JUnit XML, GitHub). A writer that
cannot write raises ``OutputFailed``: the others still run, and ``sweep`` exits 4 with
the report's path.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from . import gate, posting
from ..errors import OutputFailed, UsageError
from .outfile import write_output
from ..records.gate_block import BaselineBlock, GateCell
from ..records.manifest import RunManifest
from ..records.phase_record import PhaseRecord
from ..settings.sweep_options import SweepOptions

__all__ = ["Output", "Writer", "WRITERS", "MarkdownWriter", "JunitWriter", "GithubWriter"]


@dataclass(frozen=True)
class Output:
    """A finished run as the writers see it."""
    opts: SweepOptions
    run_id: str
    records: list[PhaseRecord]
    manifest: RunManifest
    report_md: str
    gate: BaselineBlock | None = None   # gate.gate_block against --baseline (None without one)

    @property
    def gate_cells(self) -> dict[str, tuple[GateCell, ...]]:
        """The cells the gate failed on, for the JUnit: regressions, and lost coverage
        unless --allow-fewer accepted it."""
        if self.gate is None:
            return {}
        return {"regressions": self.gate.regressions,
                "coverage_losses": self.gate.failing_losses}

    @property
    def report_path(self) -> Path:
        return self.opts.outputs.reports_dir / f"{self.run_id}.md"


class Writer(Protocol):
    name: str

    def wanted(self, opts: SweepOptions) -> bool: ...

    def write(self, out: Output) -> list[str]: ...


class MarkdownWriter:
    """``reports/<run-id>.md``: always."""
    name = "markdown"

    def wanted(self, opts: SweepOptions) -> bool:
        return True

    def write(self, out: Output) -> list[str]:
        try:
            write_output(out.report_path, out.report_md)
        except OSError as e:
            raise OutputFailed(f"cannot write the report {out.report_path}: "
                               f"{e.strerror or e}") from None
        return [f"report:  {out.report_path}"]


class JunitWriter:
    """``--junit PATH``: one testcase per point x phase."""
    name = "junit"

    def wanted(self, opts: SweepOptions) -> bool:
        return opts.outputs.junit is not None

    def write(self, out: Output) -> list[str]:
        try:
            path = gate.write_junit(out.records, out.opts.outputs.junit, **out.gate_cells)
            return [f"junit:   {path}"]
        except OSError as e:
            raise OutputFailed(f"cannot write the JUnit XML {out.opts.outputs.junit}: "
                               f"{e.strerror or e}") from None


class GithubWriter:
    """``$GITHUB_STEP_SUMMARY`` when set, and ``--gh-issue N`` (a comment, through gh or
    the REST API: ``harness.publish.posting``)."""
    name = "github"

    def wanted(self, opts: SweepOptions) -> bool:
        return True  # the step summary is written whenever Actions provides one

    def write(self, out: Output) -> list[str]:
        said = []
        try:
            if gate.append_github_step_summary(out.report_md):
                said.append("report appended to $GITHUB_STEP_SUMMARY")
        except OSError as e:
            raise OutputFailed(f"cannot append to $GITHUB_STEP_SUMMARY: {e.strerror or e}") from None
        if out.opts.outputs.gh_issue:
            try:  # checked before the sweep; the environment may have changed since
                way = posting.check_can_post(out.opts.outputs.gh_issue, out.opts.outputs.gh_repo,
                                             out.opts.outputs.gh_dry_run)
                said += posting.post_report(out.report_path, out.opts.outputs.gh_issue, way,
                                            dry_run=out.opts.outputs.gh_dry_run)
            except (posting.PostError, UsageError) as e:
                raise OutputFailed(f"could not post the report to issue "
                                   f"#{out.opts.outputs.gh_issue}: {e}") from None
        return said


# In the order they run (the markdown file first: the GitHub writer posts it).
WRITERS: dict[str, Writer] = {w.name: w for w in (MarkdownWriter(), JunitWriter(), GithubWriter())}
