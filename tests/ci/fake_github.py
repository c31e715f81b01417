"""A GitHub REST API in memory, behind ``httpx.MockTransport``: the four issue-comment
endpoints harness.publish.github_rest uses, with GitHub's pagination (``Link: rel="next"``),
bearer-token auth, and its error shapes (``{"message": ..., "errors": [...]}``)."""
from __future__ import annotations

import json
import re

import httpx

API = "https://api.github.com"
_LIST = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/issues/(?P<n>\d+)/comments$")
_ONE = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/issues/comments/(?P<id>\d+)$")


class FakeGitHub:
    def __init__(self, repo="octo/lab", issues=(7,), token="tok", page_size=30,
                 login: str | None = "github-actions[bot]", next_host: str | None = None):
        self.repo, self.issues, self.token, self.page_size = repo, set(issues), token, page_size
        self.login = login           # GET /user's login; None: 403, as for an Actions token
        self.next_host = next_host   # a Link: next to another host (a hostile or broken proxy)
        self.comments: dict[int, dict] = {}      # id -> comment (with "issue")
        self.requests: list[tuple[str, str]] = []
        self.fail_with: tuple[int, dict, dict] | None = None   # status, body, headers
        self._next_id = 1000

    # -- test helpers ---------------------------------------------------------------------
    def add(self, issue: int, body: str, login="someone") -> dict:
        c = {"id": self._next_id, "body": body, "issue": issue, "user": {"login": login},
             "html_url": f"https://github.com/{self.repo}/issues/{issue}#issuecomment-{self._next_id}"}
        self.comments[c["id"]] = c
        self._next_id += 1
        return c

    def on(self, issue: int) -> list[dict]:
        return sorted((c for c in self.comments.values() if c["issue"] == issue),
                      key=lambda c: c["id"])

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    # -- the API ---------------------------------------------------------------------------
    def handle(self, req: httpx.Request) -> httpx.Response:
        self.requests.append((req.method, str(req.url)))
        if self.fail_with:
            status, body, headers = self.fail_with
            return httpx.Response(status, json=body, headers=headers)
        if req.headers.get("authorization") != f"Bearer {self.token}":
            return httpx.Response(401, json={"message": "Bad credentials"})
        path = req.url.path
        if path == "/user" and req.method == "GET":
            if self.login is None:
                return httpx.Response(403, json={"message": "Resource not accessible by integration"})
            return httpx.Response(200, json={"login": self.login})
        m = _LIST.match(path)
        if m and m["repo"] == self.repo and int(m["n"]) in self.issues:
            return self._list(req, int(m["n"])) if req.method == "GET" else self._create(req, int(m["n"]))
        m = _ONE.match(path)
        if m and m["repo"] == self.repo and int(m["id"]) in self.comments:
            cid = int(m["id"])
            if req.method == "PATCH":
                return self._update(req, cid)
            if req.method == "DELETE":
                del self.comments[cid]
                return httpx.Response(204)
        return httpx.Response(404, json={"message": "Not Found"})

    def _body(self, req) -> str | httpx.Response:
        body = json.loads(req.content).get("body")
        if not body:
            return httpx.Response(422, json={"message": "Validation Failed",
                                             "errors": [{"field": "body", "code": "missing_field"}]})
        if len(body) > 65536:
            return httpx.Response(422, json={"message": "Validation Failed", "errors": [
                {"message": "Body is too long (maximum is 65536 characters)"}]})
        return body

    def _list(self, req, issue) -> httpx.Response:
        per_page = min(int(req.url.params.get("per_page", 30)), 100, self.page_size)
        page = int(req.url.params.get("page", 1))
        items = self.on(issue)
        chunk = items[(page - 1) * per_page: page * per_page]
        headers = {}
        if page * per_page < len(items):
            nxt = f"{self.next_host or API}{req.url.path}?per_page={per_page}&page={page + 1}"
            headers["link"] = f'<{nxt}>; rel="next"'
        out = [{k: v for k, v in c.items() if k != "issue"} for c in chunk]
        return httpx.Response(200, json=out, headers=headers)

    def _create(self, req, issue) -> httpx.Response:
        body = self._body(req)
        if isinstance(body, httpx.Response):
            return body
        c = self.add(issue, body, login=self.login or "github-actions[bot]")
        return httpx.Response(201, json={k: v for k, v in c.items() if k != "issue"})

    def _update(self, req, cid) -> httpx.Response:
        body = self._body(req)
        if isinstance(body, httpx.Response):
            return body
        self.comments[cid]["body"] = body
        return httpx.Response(200, json={k: v for k, v in self.comments[cid].items() if k != "issue"})
