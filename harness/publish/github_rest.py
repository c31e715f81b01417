"""Post a sweep report to a GitHub issue or pull request through the REST API, without ``gh``.

    python -m harness.publish.github_rest --repo OWNER/NAME (--issue N | --pr N)
                                  [--marker M] [--dry-run] [--api-url URL] REPORT.md

One report is one comment, found again by a hidden marker on its first line
(``<!-- residue-lab:M -->``) and updated in place on the next push: the issue's comments
are listed (every page), a comment carrying the marker *and written by the token's own
user* is PATCHed, otherwise one is POSTed (anyone can type a marker: another author's
comment is never edited or deleted). The user is ``GET /user``'s login; a GitHub Actions
token cannot read it (403) and posts as ``github-actions[bot]``; where neither says, every
report is a new comment. Pages are followed through ``Link: rel="next"`` only on the API's
own scheme, host and port: the token is never sent elsewhere. A report longer than GitHub's 65,536-character comment body is split into parts
(``comment_split.py``: ``<!-- residue-lab:M part 2/3 -->``) at section, table and code-block boundaries, never
inside a table row, a continued table repeating its header, and the non-ok cells first:
part 1 carries the report's title and headline, then the non-ok cells under the heading
``## Non-ok cells``, then the rest in the report's order. Parts an earlier, longer
report left behind are deleted, so a thread keeps one report.

A pull request's conversation comments are issue comments in the REST API (every pull
request is an issue), so ``--pr`` and ``--issue`` use the same endpoints.

The token is ``GITHUB_TOKEN`` (``GH_TOKEN`` as a fallback); the API root is
``--api-url``, else ``GITHUB_API_URL`` (set by GitHub Actions, also on GitHub Enterprise),
else https://api.github.com. ``--dry-run`` prints the requests it would send, bodies
included, and sends nothing (no token needed): it cannot know whether a comment with the
marker exists, so it shows the POSTs and says which would be PATCHes.

Exit codes (``harness.errors.PostExit``): 0 posted (or printed, with ``--dry-run``); 2
usage: bad arguments, no report file, no token; 10 GitHub refused the token (401, 403,
rate limit); 11 not found (404: the repository or issue does not exist, or the token
cannot see it); 12 GitHub rejected the request (422 validation, any other HTTP error);
13 GitHub could not be reached.
Every error is one line on stderr.

This module is self-contained (httpx, the standard library and ``harness.errors``): tests drive it
through ``httpx.MockTransport`` via the ``transport`` argument.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Iterable, Sequence, TextIO

import httpx

from ..errors import HarnessError, PostExit
from .comment_split import COMMENT_LIMIT, DEFAULT_MARKER, comment_bodies, marker_line

_MARKER_LINE = re.compile(r"^<!-- residue-lab:(?P<m>[A-Za-z0-9_.:/-]+)"
                          r"(?: part (?P<i>\d+)/(?P<n>\d+))? -->")

DEFAULT_API_URL = "https://api.github.com"
ACTIONS_LOGIN = "github-actions[bot]"   # who a workflow's GITHUB_TOKEN writes as
PER_PAGE = 100                   # the most GitHub returns per page of comments

EXIT_OK, EXIT_USAGE, EXIT_AUTH, EXIT_NOT_FOUND, EXIT_REJECTED, EXIT_NETWORK = (
    PostExit.OK, PostExit.USAGE, PostExit.AUTH, PostExit.NOT_FOUND, PostExit.REJECTED,
    PostExit.NETWORK)

_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_MARKER = re.compile(r"^[A-Za-z0-9_.:/-]{1,100}$")
class GitHubError(HarnessError):
    """A request GitHub refused or could not be sent; ``exit_code`` (a ``PostExit``) says
    which kind: ``main`` exits with it, ``posting`` turns it into a ``PostError``."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


# ----------------------------------------------------------------------------------------
# Talking to GitHub
# ----------------------------------------------------------------------------------------
@dataclass
class Request:
    method: str
    path: str
    body: str | None = None
    note: str = ""

    def payload(self) -> dict | None:
        return None if self.body is None else {"body": self.body}


@dataclass
class Target:
    repo: str
    number: int
    kind: str = "issue"           # "issue" | "pr": the words in messages, not the endpoint

    @property
    def what(self) -> str:
        return f"{'pull request' if self.kind == 'pr' else 'issue'} {self.repo}#{self.number}"

    @property
    def comments_path(self) -> str:
        return f"/repos/{self.repo}/issues/{self.number}/comments"

    def comment_path(self, comment_id: int) -> str:
        return f"/repos/{self.repo}/issues/comments/{comment_id}"


def _error_for(resp: httpx.Response, target: Target) -> GitHubError:
    try:
        data = resp.json()
    except ValueError:
        data = {}
    message = str(data.get("message") or resp.reason_phrase or "").strip()
    errors = data.get("errors")
    if errors:
        message += " (" + "; ".join(str(e.get("message") or e.get("code") or e)
                                    if isinstance(e, dict) else str(e) for e in errors) + ")"
    head = f"GitHub answered HTTP {resp.status_code} to {resp.request.method} {resp.request.url.path}"
    code = resp.status_code
    if code == 401:
        return GitHubError(f"{head}: {message}: the token was refused; check GITHUB_TOKEN", EXIT_AUTH)
    if code == 403 or (code == 429):
        if resp.headers.get("x-ratelimit-remaining") == "0" or code == 429:
            return GitHubError(f"{head}: rate limit exceeded (resets at epoch "
                               f"{resp.headers.get('x-ratelimit-reset', '?')}): {message}", EXIT_AUTH)
        return GitHubError(f"{head}: {message}: the token may not write comments on "
                           f"{target.what} (a workflow needs `permissions: issues: write, "
                           "pull-requests: write`)", EXIT_AUTH)
    if code == 404:
        return GitHubError(f"{head}: {target.what} was not found, or the token cannot see it",
                           EXIT_NOT_FOUND)
    return GitHubError(f"{head}: {message or 'request rejected'}", EXIT_REJECTED)


class GitHubComments:
    """The four issue-comment endpoints this module needs, on one ``httpx.Client``."""

    def __init__(self, target: Target, token: str, *, api_url: str = DEFAULT_API_URL,
                 transport: httpx.BaseTransport | None = None, timeout: float = 30.0):
        self.target = target
        self._client = httpx.Client(
            base_url=api_url.rstrip("/"), transport=transport, timeout=timeout,
            headers={"Authorization": f"Bearer {token}",
                     "Accept": "application/vnd.github+json",
                     "X-GitHub-Api-Version": "2022-11-28",
                     "User-Agent": "residue-lab-github-rest"})

    def close(self) -> None:
        self._client.close()

    def _send(self, method: str, url: str, **kw) -> httpx.Response:
        try:
            resp = self._client.request(method, url, **kw)
        except httpx.HTTPError as e:
            raise GitHubError(f"could not reach GitHub ({method} {url}): {e}", EXIT_NETWORK) from None
        if resp.is_error:
            raise _error_for(resp, self.target)
        return resp

    def list_comments(self) -> list[dict]:
        """Every comment of the issue, following the ``Link: rel="next"`` pages on the
        API's own origin only (the client sends the token with every request)."""
        out: list[dict] = []
        url: str | None = self.target.comments_path
        params: dict | None = {"per_page": PER_PAGE}
        while url:
            resp = self._send("GET", url, params=params)
            out.extend(resp.json())
            url = resp.links.get("next", {}).get("url")
            if url and not self._same_origin(url):
                raise GitHubError(f"{self.target.what}: the comment list's next page is on "
                                  f"another host ({httpx.URL(url).host}); not followed, the "
                                  "token is sent only to the API", EXIT_REJECTED)
            params = None  # the next link carries the query
        return out

    def _same_origin(self, url: str) -> bool:
        u, base = httpx.URL(url), self._client.base_url
        if u.is_relative_url:
            return True
        return (u.scheme, u.host, u.port) == (base.scheme, base.host, base.port)

    def login(self) -> str | None:
        """The token's user (``GET /user``); an Actions token cannot read it (403) and
        writes as github-actions[bot]; None when nothing says (no comment is ours)."""
        try:
            resp = self._client.get("/user")
        except httpx.HTTPError as e:
            raise GitHubError(f"could not reach GitHub (GET /user): {e}", EXIT_NETWORK) from None
        if resp.status_code == 401:
            raise _error_for(resp, self.target)
        if resp.status_code == 200 and isinstance(resp.json(), dict):
            return resp.json().get("login") or None
        return ACTIONS_LOGIN if os.environ.get("GITHUB_ACTIONS") == "true" else None

    def execute(self, req: Request) -> dict | None:
        resp = self._send(req.method, req.path, json=req.payload())
        return resp.json() if resp.content else None


def find_parts(comments: Iterable[dict], marker: str,
               author: str | None = "") -> dict[int, list[dict]]:
    """Comments whose first line is this marker, by part number (an unsplit report is
    part 1), oldest first; with ``author``, only that user's (None: nobody's, the user is
    unknown; "": anybody's)."""
    parts: dict[int, list[dict]] = {}
    if author is None:
        return parts
    for c in comments:
        if author and (c.get("user") or {}).get("login") != author:
            continue
        m = _MARKER_LINE.match(c.get("body") or "")
        if m and m.group("m") == marker:
            parts.setdefault(int(m.group("i") or 1), []).append(c)
    for cs in parts.values():
        cs.sort(key=lambda c: c.get("id") or 0)
    return parts


def plan_requests(target: Target, bodies: Sequence[str],
                  existing: dict[int, list[dict]]) -> list[Request]:
    """PATCH the parts that exist, POST the missing ones, DELETE leftovers (parts beyond
    ``len(bodies)`` and duplicates of a part), so the thread keeps one report."""
    reqs: list[Request] = []
    n = len(bodies)
    for i, body in enumerate(bodies, 1):
        have = existing.get(i) or []
        if have:
            reqs.append(Request("PATCH", target.comment_path(have[0]["id"]), body, f"part {i}/{n}"))
        else:
            reqs.append(Request("POST", target.comments_path, body, f"part {i}/{n}"))
    for i, cs in sorted(existing.items()):
        for c in (cs if i > n else cs[1:]):
            reqs.append(Request("DELETE", target.comment_path(c["id"]), None,
                                f"left over from an earlier report (part {i})"))
    return reqs


def post_report(report: str, target: Target, *, token: str | None, marker: str = DEFAULT_MARKER,
                dry_run: bool = False, api_url: str = DEFAULT_API_URL,
                transport: httpx.BaseTransport | None = None, out: TextIO | None = None,
                limit: int = COMMENT_LIMIT) -> list[Request]:
    """Post ``report`` as one updated comment (or several parts) on ``target``; returns the
    requests sent (or, with ``dry_run``, printed). Raises :class:`GitHubError`."""
    out = out or sys.stdout
    bodies = comment_bodies(report, marker, limit=limit)
    base = api_url.rstrip("/")
    if dry_run:
        reqs = plan_requests(target, bodies, {})
        print(f"github_rest: dry run, nothing sent: {len(bodies)} comment part(s) for "
              f"{target.what}, marker {marker_line(marker)}", file=out)
        print(f"GET {base}{target.comments_path}?per_page={PER_PAGE}  # list every page, "
              "find the comments carrying the marker", file=out)
        patch_url = f"{base}/repos/{target.repo}/issues/comments/ID"
        for r in reqs:
            print(f"{r.method} {base}{r.path}  # {r.note}; PATCH {patch_url} instead "
                  "when a comment carries this part's marker", file=out)
            print(json.dumps(r.payload(), ensure_ascii=False), file=out)
        return reqs
    if not token:
        raise GitHubError("no token: set GITHUB_TOKEN (in a workflow: `env: GITHUB_TOKEN: "
                          "${{ github.token }}`), or use --dry-run", EXIT_USAGE)
    api = GitHubComments(target, token, api_url=api_url, transport=transport)
    try:
        me = api.login()
        if me is None:
            print("github_rest: the token's user is unknown (GET /user refused, not in "
                  "GitHub Actions): posting a new comment, editing none", file=out)
        reqs = plan_requests(target, bodies, find_parts(api.list_comments(), marker, me))
        for r in reqs:
            answer = api.execute(r)
            where = (answer or {}).get("html_url") or f"{base}{r.path}"
            print(f"github_rest: {r.method} {r.note}: {where}", file=out)
    finally:
        api.close()
    return reqs


# ----------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise GitHubError(message, EXIT_USAGE)


def _parser() -> _Parser:
    p = _Parser(prog="python -m harness.publish.github_rest",
                description="Post a report as one comment (updated on every run, split into "
                "parts past 65,536 characters, non-ok cells first) on a GitHub issue or pull "
                "request through the REST API. Token: GITHUB_TOKEN.",
                epilog="Exit codes: 0 posted, 2 usage / no token, 3 token refused (401/403), "
                "4 not found (404), 5 rejected (422, other HTTP errors), 6 unreachable.")
    p.add_argument("report", metavar="FILE", help="the markdown report")
    p.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY"),
                   help="OWNER/NAME (default: $GITHUB_REPOSITORY)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--issue", type=int, metavar="N", help="issue number")
    which.add_argument("--pr", type=int, metavar="N", help="pull request number")
    p.add_argument("--marker", default=DEFAULT_MARKER,
                   help=f"which comment to update: <!-- residue-lab:MARKER --> (default {DEFAULT_MARKER}); "
                   "one marker per report kept on a thread, e.g. one per matrix job")
    p.add_argument("--dry-run", action="store_true", help="print the requests, send nothing")
    p.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL,
                   help="REST API root (default: $GITHUB_API_URL or https://api.github.com)")
    return p


def _target(ns: argparse.Namespace) -> Target:
    if not ns.repo or not _REPO.match(ns.repo):
        raise GitHubError(f"--repo needs OWNER/NAME, got {ns.repo!r}", EXIT_USAGE)
    number, kind = (ns.pr, "pr") if ns.pr is not None else (ns.issue, "issue")
    if number < 1:
        raise GitHubError(f"--{kind} needs a positive number, got {number}", EXIT_USAGE)
    if not _MARKER.match(ns.marker):
        raise GitHubError(f"--marker {ns.marker!r}: use 1-100 of A-Z a-z 0-9 _ . : / -", EXIT_USAGE)
    return Target(ns.repo, number, kind)


def main(argv: Sequence[str] | None = None, *, transport: httpx.BaseTransport | None = None) -> int:
    try:
        ns = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        target = _target(ns)
        try:
            with open(ns.report, encoding="utf-8") as fh:
                report = fh.read()
        except OSError as e:
            raise GitHubError(f"cannot read the report {ns.report}: {e.strerror}", EXIT_USAGE) from None
        token = os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")
        post_report(report, target, token=token, marker=ns.marker, dry_run=ns.dry_run,
                    api_url=ns.api_url, transport=transport)
    except GitHubError as e:
        print(f"github_rest: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # `... --dry-run | head`
        # The reader is gone: point stdout at /dev/null so the flush at exit cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


__all__ = ["GitHubError", "Target", "Request", "GitHubComments", "find_parts",
           "plan_requests", "post_report", "main", "EXIT_OK", "EXIT_USAGE", "EXIT_AUTH",
           "EXIT_NOT_FOUND", "EXIT_REJECTED", "EXIT_NETWORK"]

if __name__ == "__main__":
    sys.exit(main())
