"""harness.publish.github_rest against an in-memory GitHub (httpx.MockTransport): one comment per
marker, updated in place across pages of other comments; dry mode; one-line errors with
their documented exit codes."""
from __future__ import annotations

import json

import httpx
import pytest

from harness.publish import github_rest as gr

from .fake_github import API, FakeGitHub

ROOT = gr.__file__.rsplit("/harness/", 1)[0]
REPORT = open(f"{ROOT}/reports/full128.md", encoding="utf-8").read()


def _post(gh: FakeGitHub, report: str, *, number=7, kind="pr", marker="sweep-report", token="tok"):
    return gr.post_report(report, gr.Target(gh.repo, number, kind), token=token, marker=marker,
                          api_url=API, transport=gh.transport())


def test_first_post_creates_one_comment_with_the_marker_and_the_report():
    gh = FakeGitHub()
    _post(gh, REPORT)
    [c] = gh.on(7)
    assert c["body"] == "<!-- residue-lab:sweep-report -->\n" + REPORT
    assert [m for m, _ in gh.requests] == ["GET", "GET", "POST"]   # /user, the list, the post
    assert gh.requests[0][1] == f"{API}/user"


def test_a_second_push_updates_the_same_comment_found_on_a_later_page():
    gh = FakeGitHub(page_size=30)
    for i in range(70):
        gh.add(7, f"review comment {i}")
    _post(gh, REPORT)
    for i in range(45):                      # the thread goes on: the marker is on page 3 of 4
        gh.add(7, f"later comment {i}")
    ours = [c for c in gh.on(7) if c["body"].startswith("<!-- residue-lab:")]
    assert len(ours) == 1
    first_id = ours[0]["id"]
    gh.requests.clear()
    updated = REPORT.replace("127 clean, 1 broken", "128 clean")
    _post(gh, updated)
    ours = [c for c in gh.on(7) if c["body"].startswith("<!-- residue-lab:")]
    assert [c["id"] for c in ours] == [first_id]
    assert ours[0]["body"].endswith(updated)
    methods = [m for m, _ in gh.requests]
    assert methods == ["GET"] * 5 + ["PATCH"]     # /user, then 4 pages
    assert "page=4" in gh.requests[4][1]
    assert gh.requests[-1][1] == f"{API}/repos/octo/lab/issues/comments/{first_id}"


def test_markers_keep_reports_apart():
    gh = FakeGitHub()
    _post(gh, REPORT, marker="sweep-mtp")
    _post(gh, REPORT, marker="sweep-dflash2")
    _post(gh, REPORT, marker="sweep-mtp")
    assert [c["body"].splitlines()[0] for c in gh.on(7)] == [
        "<!-- residue-lab:sweep-mtp -->", "<!-- residue-lab:sweep-dflash2 -->"]


def test_a_quoted_marker_is_not_ours():
    gh = FakeGitHub()
    gh.add(7, "> <!-- residue-lab:sweep-report -->\n> quoted by a reviewer")
    _post(gh, REPORT)
    assert len(gh.on(7)) == 2 and gh.on(7)[0]["body"].startswith("> ")


def test_a_marker_comment_by_another_author_is_never_edited_or_deleted():
    # issue 23 risk: anyone can type the marker; only the token's own comments are ours
    gh = FakeGitHub(login="residue-bot")
    spoof = gh.add(7, "<!-- residue-lab:sweep-report -->\nnot the bot's", login="mallory")
    part2 = gh.add(7, "<!-- residue-lab:sweep-report part 2/2 -->\nnot the bot's", login="mallory")
    _post(gh, REPORT)
    assert gh.comments[spoof["id"]]["body"].endswith("not the bot's")
    assert part2["id"] in gh.comments
    ours = [c for c in gh.on(7) if c["user"]["login"] == "residue-bot"]
    assert len(ours) == 1 and ours[0]["body"].endswith(REPORT)
    _post(gh, REPORT.replace("127 clean", "128 clean"))   # the bot's own comment: PATCHed
    assert [c["id"] for c in gh.on(7) if c["user"]["login"] == "residue-bot"] == [ours[0]["id"]]
    assert [m for m, _ in gh.requests][-1] == "PATCH"


def test_an_actions_token_writes_as_github_actions(monkeypatch):
    gh = FakeGitHub(login=None)                  # GET /user: 403, as for GITHUB_TOKEN
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    _post(gh, REPORT)
    _post(gh, REPORT)
    assert len(gh.on(7)) == 1 and [m for m, _ in gh.requests][-1] == "PATCH"
    monkeypatch.delenv("GITHUB_ACTIONS")
    _post(gh, REPORT)                            # nobody says who we are: edit nothing
    assert len(gh.on(7)) == 2 and [m for m, _ in gh.requests][-1] == "POST"


def test_a_next_page_on_another_host_is_not_followed_with_the_token():
    gh = FakeGitHub(page_size=2, next_host="https://collector.example")
    for i in range(5):
        gh.add(7, f"comment {i}")
    with pytest.raises(gr.GitHubError) as e:
        _post(gh, REPORT)
    assert e.value.exit_code == gr.EXIT_REJECTED and "collector.example" in str(e.value)
    assert not [u for _, u in gh.requests if "collector.example" in u]
    assert [m for m, _ in gh.requests] == ["GET", "GET"]   # /user, page 1; nothing posted


def test_dry_run_prints_the_requests_and_sends_nothing(capsys):
    def refuse(req):
        raise AssertionError(f"dry run sent {req.method} {req.url}")
    reqs = gr.post_report(REPORT, gr.Target("octo/lab", 7, "pr"), token=None, dry_run=True,
                          api_url=API, transport=httpx.MockTransport(refuse))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("github_rest: dry run, nothing sent: 1 comment part(s) for pull request octo/lab#7")
    assert out[1].startswith(f"GET {API}/repos/octo/lab/issues/7/comments?per_page=100")
    assert out[2].startswith(f"POST {API}/repos/octo/lab/issues/7/comments  # part 1/1")
    assert json.loads(out[3]) == {"body": "<!-- residue-lab:sweep-report -->\n" + REPORT}
    assert [r.method for r in reqs] == ["POST"]


@pytest.mark.parametrize("status,body,headers,code,words", [
    (401, {"message": "Bad credentials"}, {}, gr.EXIT_AUTH, "the token was refused"),
    (403, {"message": "Resource not accessible by integration"}, {}, gr.EXIT_AUTH,
     "pull-requests: write"),
    (403, {"message": "API rate limit exceeded"}, {"x-ratelimit-remaining": "0",
                                                   "x-ratelimit-reset": "1790000000"},
     gr.EXIT_AUTH, "rate limit exceeded (resets at epoch 1790000000)"),
    (404, {"message": "Not Found"}, {}, gr.EXIT_NOT_FOUND,
     "pull request octo/lab#7 was not found, or the token cannot see it"),
    (422, {"message": "Validation Failed", "errors": [{"message": "Body is too long"}]}, {},
     gr.EXIT_REJECTED, "Validation Failed (Body is too long)"),
    (502, {"message": "Server Error"}, {}, gr.EXIT_REJECTED, "HTTP 502"),
])
def test_github_errors_are_one_line_with_their_exit_code(tmp_path, capsys, monkeypatch, status,
                                                          body, headers, code, words):
    gh = FakeGitHub()
    gh.fail_with = (status, body, headers)
    report = tmp_path / "r.md"
    report.write_text(REPORT)
    monkeypatch.setenv("GITHUB_TOKEN", "tok")
    rc = gr.main(["--repo", "octo/lab", "--pr", "7", str(report)], transport=gh.transport())
    err = capsys.readouterr().err
    assert rc == code
    assert err.count("\n") == 1 and err.startswith("github_rest: error: ") and words in err
    assert "Traceback" not in err


def test_real_status_paths_unknown_issue_and_bad_token(tmp_path, capsys, monkeypatch):
    gh = FakeGitHub(issues=(7,))
    report = tmp_path / "r.md"
    report.write_text(REPORT)
    monkeypatch.setenv("GITHUB_TOKEN", "tok")
    assert gr.main(["--repo", "octo/lab", "--issue", "8", str(report)],
                   transport=gh.transport()) == gr.EXIT_NOT_FOUND
    monkeypatch.setenv("GITHUB_TOKEN", "expired")
    assert gr.main(["--repo", "octo/lab", "--issue", "7", str(report)],
                   transport=gh.transport()) == gr.EXIT_AUTH
    assert gh.on(7) == []


def test_unreachable_github_is_exit_6(tmp_path, capsys, monkeypatch):
    def down(req):
        raise httpx.ConnectError("connection refused", request=req)
    report = tmp_path / "r.md"
    report.write_text(REPORT)
    monkeypatch.setenv("GITHUB_TOKEN", "tok")
    assert gr.main(["--repo", "o/r", "--pr", "1", str(report)],
                   transport=httpx.MockTransport(down)) == gr.EXIT_NETWORK
    assert "could not reach GitHub" in capsys.readouterr().err


@pytest.mark.parametrize("argv,env,words", [
    (["--repo", "octo/lab", "--pr", "7", "R"], {}, "no token: set GITHUB_TOKEN"),
    (["--repo", "octo", "--pr", "7", "R"], {"GITHUB_TOKEN": "t"}, "--repo needs OWNER/NAME"),
    (["--repo", "o/r", "--pr", "0", "R"], {"GITHUB_TOKEN": "t"}, "--pr needs a positive number"),
    (["--repo", "o/r", "--issue", "1", "--pr", "2", "R"], {}, "not allowed with argument"),
    (["--repo", "o/r", "--pr", "1", "--marker", "x -->", "R"], {}, "--marker"),
    (["--repo", "o/r", "--pr", "1", "missing.md"], {"GITHUB_TOKEN": "t"}, "cannot read the report"),
])
def test_usage_errors_are_one_line_exit_2(tmp_path, capsys, monkeypatch, argv, env, words):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GH_TOKEN", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "R").write_text(REPORT)
    monkeypatch.chdir(tmp_path)

    def refuse(req):
        raise AssertionError("no request may be sent on a usage error")
    assert gr.main(argv, transport=httpx.MockTransport(refuse)) == gr.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
