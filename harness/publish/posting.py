"""``--gh-issue N``: post a report as a comment, through ``gh`` or the GitHub REST API.

Two ways to post, chosen once, up front (``check_can_post``, before any server starts):

- ``gh`` (the GitHub CLI) when it is on PATH: ``gh issue comment N --body-file REPORT``;
- otherwise the REST API (``harness.publish.github_rest``) with ``GITHUB_TOKEN`` (or ``GH_TOKEN``)
  on the repository ``--gh-repo`` names, else ``$GITHUB_REPOSITORY`` (set in GitHub
  Actions), else the ``origin`` remote of the current git checkout when it is on
  github.com. The REST way updates one comment per report and splits a report past
  65,536 characters into parts, non-ok cells first. A report too long for one ``gh``
  comment goes through the REST API when a token is there.

``--gh-dry-run`` prints the request(s) the chosen way would send, sends nothing and needs
no token. Every failure is a ``PostError`` (one sentence); ``cli`` turns it into exit
code 4 with the report's path after a sweep.
"""
from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import HandledError, UsageError

__all__ = ["PostError", "PostWay", "choose_way", "check_can_post", "post_report"]

_GITHUB_REMOTE = re.compile(r"github\.com[:/](?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?$")


class PostError(HandledError, RuntimeError):
    """The report could not be posted; the message says why."""


@dataclass(frozen=True)
class PostWay:
    kind: str                 # "gh" | "rest"
    gh: str | None = None     # gh's path
    token: str | None = None
    repo: str | None = None   # OWNER/NAME (REST: required unless a dry run)

    def describe(self) -> str:
        return (f"gh ({self.gh})" if self.kind == "gh"
                else f"the GitHub REST API on {self.repo or 'OWNER/NAME'}")


def _token() -> str | None:
    return os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN") or None


def _origin_repo() -> str | None:
    """OWNER/NAME of the current checkout's ``origin`` when it is on github.com."""
    try:
        url = subprocess.run(["git", "remote", "get-url", "origin"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    m = _GITHUB_REMOTE.search(url)
    return m.group("repo") if m else None


def _repo(explicit: str | None) -> str | None:
    return explicit or os.environ.get("GITHUB_REPOSITORY") or _origin_repo()


def choose_way(repo: str | None = None, *, dry_run: bool = False) -> PostWay | None:
    """gh when it is on PATH; the REST API when a token (or a dry run) and a repository are
    known; None when there is no way to post."""
    gh = shutil.which("gh")
    if gh:
        return PostWay("gh", gh=gh, token=_token(), repo=repo)
    token = _token()
    if token or dry_run:
        return PostWay("rest", token=token, repo=_repo(repo))
    return None


def check_can_post(issue: int | None, repo: str | None, dry_run: bool) -> PostWay | None:
    """Raise ``UsageError`` now when ``--gh-issue`` cannot be carried out at the end."""
    if not issue:   # --gh-repo or --gh-dry-run alone: refused by settings/flag_checks.RULES
        return None
    if repo is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        raise UsageError(f"--gh-repo: {repo!r} is not OWNER/NAME")
    way = choose_way(repo, dry_run=dry_run)
    if way is None:
        raise UsageError("--gh-issue: no way to post: `gh` is not on PATH and GITHUB_TOKEN "
                         "is not set (install gh and run `gh auth login`, or export "
                         "GITHUB_TOKEN; --gh-dry-run prints the request without either)")
    if way.kind == "rest" and not way.repo and not dry_run:
        raise UsageError("--gh-issue: GITHUB_TOKEN is set but no repository is known: pass "
                         "--gh-repo OWNER/NAME (or set GITHUB_REPOSITORY)")
    return way


def post_report(report_path: Path, issue: int, way: PostWay, *,
                dry_run: bool = False) -> list[str]:
    """Post (or with ``dry_run`` print) the report; returns the lines to say on stderr
    (a dry run's requests go to stdout). Raises ``PostError``."""
    if way.kind == "gh":
        if dry_run:
            argv = [way.gh or "gh", "issue", "comment", str(issue), "--body-file", str(report_path)]
            if way.repo:
                argv += ["--repo", way.repo]
            print(f"gh: dry run, nothing sent: {shlex.join(argv)}")
            return [f"report not posted (--gh-dry-run): the gh command is above"]
        from . import gate   # here: start-up cost paid by every sweep process, most post nothing
        try:
            gate.post_issue_comment(report_path, issue, repo=way.repo, gh=way.gh)
            return [f"report posted to issue #{issue} (gh)"]
        except gate.GateError as e:
            too_long = "takes at most" in str(e)
            if not (too_long and way.token and _repo(way.repo)):
                raise PostError(str(e)) from None
            way = PostWay("rest", token=way.token, repo=_repo(way.repo))
    return _post_rest(report_path, issue, way, dry_run=dry_run)


def _post_rest(report_path: Path, issue: int, way: PostWay, *, dry_run: bool) -> list[str]:
    from . import github_rest
    try:
        report = Path(report_path).read_text(encoding="utf-8")
    except OSError as e:
        raise PostError(f"cannot read the report {report_path}: {e.strerror}") from None
    api_url = os.environ.get("GITHUB_API_URL") or github_rest.DEFAULT_API_URL
    target = github_rest.Target(way.repo or "OWNER/NAME", issue)
    said = io.StringIO()
    try:
        github_rest.post_report(report, target, token=way.token, dry_run=dry_run,
                                api_url=api_url, out=None if dry_run else said)
    except github_rest.GitHubError as e:
        raise PostError(str(e)) from None
    if dry_run:
        said = ["report not posted (--gh-dry-run): the REST requests are above"]
        if not way.repo:   # the request above names a placeholder, not a repository
            said.append("--gh-dry-run: no repository is known, so the requests say "
                        "repos/OWNER/NAME; pass --gh-repo OWNER/NAME or set GITHUB_REPOSITORY")
        return said
    return [ln for ln in said.getvalue().splitlines() if ln] + \
        [f"report posted to issue {target.repo}#{issue} (REST API)"]
