"""Where a finished sweep's results go besides the results file: output writers.

Each writer meets one small interface (``wanted(opts)``, ``write(output)`` returning
the lines ``sweep`` says on stderr) and is named in ``WRITERS``, which ``cli`` runs in
order after the report is rendered. Adding an output format: one class here and one
entry in ``WRITERS`` (docs/architecture.md). The formats themselves live in
``harness.report`` (markdown) and ``harness.gate`` (JUnit XML, GitHub).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from . import gate

__all__ = ["Output", "Writer", "WRITERS", "MarkdownWriter", "JunitWriter", "GithubWriter"]


@dataclass(frozen=True)
class Output:
    """A finished run as the writers see it."""
    opts: Any                 # configs.SweepOptions
    run_id: str
    records: list[dict]
    manifest: dict
    report_md: str
    coverage_losses: list | None = None   # gate.find_coverage_losses against --baseline

    @property
    def report_path(self) -> Path:
        return self.opts.reports_dir / f"{self.run_id}.md"


class Writer(Protocol):
    name: str

    def wanted(self, opts: Any) -> bool: ...

    def write(self, out: Output) -> list[str]: ...


class MarkdownWriter:
    """``reports/<run-id>.md``: always."""
    name = "markdown"

    def wanted(self, opts: Any) -> bool:
        return True

    def write(self, out: Output) -> list[str]:
        out.report_path.parent.mkdir(parents=True, exist_ok=True)
        out.report_path.write_text(out.report_md, encoding="utf-8")
        return [f"report:  {out.report_path}"]


class JunitWriter:
    """``--junit PATH``: one testcase per point x phase."""
    name = "junit"

    def wanted(self, opts: Any) -> bool:
        return opts.junit is not None

    def write(self, out: Output) -> list[str]:
        return [f"junit:   {gate.write_junit(out.records, out.opts.junit, coverage_losses=out.coverage_losses)}"]


class GithubWriter:
    """``$GITHUB_STEP_SUMMARY`` when set, and ``--gh-issue N`` (a comment, through gh)."""
    name = "github"

    def wanted(self, opts: Any) -> bool:
        return True  # the step summary is written whenever Actions provides one

    def write(self, out: Output) -> list[str]:
        said = []
        if gate.append_github_step_summary(out.report_md):
            said.append("report appended to $GITHUB_STEP_SUMMARY")
        if out.opts.gh_issue:
            try:
                gate.post_issue_comment(out.report_path, out.opts.gh_issue)
                said.append(f"report posted to issue #{out.opts.gh_issue}")
            except gate.GateError as e:  # the sweep's verdict still stands
                said.append(f"sweep: could not post the report: {e}")
        return said


# In the order they run (the markdown file first: the GitHub writer posts it).
WRITERS: dict[str, Writer] = {w.name: w for w in (MarkdownWriter(), JunitWriter(), GithubWriter())}
