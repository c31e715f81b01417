"""``logprobs`` in /v1/chat/completions: the copy model's own head scores (see
docs/lab-engine.md, "Logprobs"), in OpenAI's format, streamed too, and never a change to
what is generated."""
from __future__ import annotations

import json
import math

import openai
import pytest

from labserver import FULL, HUGE, MTP, lab_server, make_document, pad_to_residue, padding

DOC = make_document(40)
N = 5
EXPECTED = "\n".join(DOC[:N])


def build(n: int) -> str:
    return (f"Reproduce the first {N} lines of the document below exactly.\n\n"
            + "\n".join(DOC) + "\n" + padding(n))


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with lab_server(["--speculative-config", MTP, "--enable-prefix-caching"],
                    tmp_path_factory.mktemp("lp") / "server.log") as s:
        yield s


def test_openai_client_logprobs_are_the_heads_scores(srv):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
    r = client.chat.completions.create(model="lab-copy", max_tokens=400, logprobs=True,
                                       top_logprobs=3,
                                       messages=[{"role": "user", "content": build(0)}])
    ch = r.choices[0]
    assert ch.message.content == EXPECTED
    content = ch.logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(e.token for e in content[:-1]) == EXPECTED
    assert content[-1].token == "<|im_end|>"  # the stop token is scored too
    for e in content:
        assert e.token == e.top_logprobs[0].token  # the decision is the head's argmax
        assert e.logprob == e.top_logprobs[0].logprob > math.log(0.5)
        assert 1 <= len(e.top_logprobs) <= 3
        assert sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1 + 1e-9
        assert [t.logprob for t in e.top_logprobs] == sorted(
            (t.logprob for t in e.top_logprobs), reverse=True)
        assert e.bytes == list(e.token.encode())
    # the document's line numbers repeat their digits: some copy steps had rivals
    assert any(len(e.top_logprobs) > 1 for e in content)


def test_streamed_logprobs_equal_the_plain_ones(srv):
    body = {"model": "lab-copy", "max_tokens": 400, "logprobs": True, "top_logprobs": 2,
            "messages": [{"role": "user", "content": build(3)}]}
    plain = srv.http.post("/v1/chat/completions", json=body).json()
    streamed, text = [], ""
    with srv.http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ch = json.loads(line[6:])["choices"][0]
            text += ch["delta"].get("content") or ""
            if ch["logprobs"] is not None:
                streamed += ch["logprobs"]["content"]
    assert text == plain["choices"][0]["message"]["content"] == EXPECTED
    assert streamed == plain["choices"][0]["logprobs"]["content"]


def test_tokens_as_token_ids_and_no_logprobs_by_default(srv):
    body = {"model": "lab-copy", "max_tokens": 50, "messages": [{"role": "user", "content": build(1)}]}
    assert srv.http.post("/v1/chat/completions", json=body).json()["choices"][0]["logprobs"] is None
    r = srv.http.post("/v1/chat/completions", json={**body, "logprobs": True,
                                                    "return_tokens_as_token_ids": True}).json()
    content = r["choices"][0]["logprobs"]["content"]
    ids = srv.http.post("/tokenize", json={"prompt": r["choices"][0]["message"]["content"]}
                        ).json()["tokens"]
    assert [e["token"] for e in content[:len(ids)]] == [f"token_id:{i}" for i in ids]
    assert all(e["top_logprobs"] == [] for e in content)  # top_logprobs 0: the token only


@pytest.mark.parametrize("extra,param", [({"top_logprobs": 2}, "top_logprobs"),
                                         ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                                         ({"logprobs": "yes"}, "logprobs")])
def test_bad_logprobs_fields_are_400(srv, extra, param):
    r = srv.http.post("/v1/chat/completions", json={
        "model": "lab-copy", "messages": [{"role": "user", "content": "hi"}], **extra})
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def _sweep(server, logprobs: bool) -> list[dict]:
    """Bug B cells (mtp k=3, FULL, unpatched): residues 3, 4, 5, cold then self-hit."""
    srv = server("--speculative-config", MTP, "-cc", FULL, "--patches", "none", *HUGE)
    extra = {"logprobs": True, "top_logprobs": 5} if logprobs else {}
    cells = []
    for residue in (3, 4, 5):
        content, _ = pad_to_residue(srv, build, residue)
        for phase in ("cold", "self-hit"):
            r = srv.http.post("/v1/chat/completions", json={
                "model": "lab-copy", "max_tokens": 600,
                "messages": [{"role": "user", "content": content}], **extra})
            r.raise_for_status()
            cells.append({"residue": residue, "phase": phase, "raw": r.json()})
    return cells


def test_logprobs_do_not_change_what_is_generated(server):
    """Byte-identical answers with and without logprobs, over a Bug B sweep's broken
    (residue 4 self-hit) and clean cells."""
    plain, scored = _sweep(server, False), _sweep(server, True)
    broken = 0
    for a, b in zip(plain, scored):
        ca, cb = a["raw"]["choices"][0], b["raw"]["choices"][0]
        assert json.dumps(ca["message"]["content"]).encode() == \
            json.dumps(cb["message"]["content"]).encode(), (a["residue"], a["phase"])
        assert ca["finish_reason"] == cb["finish_reason"]
        assert a["raw"]["usage"] == b["raw"]["usage"]
        assert len(cb["logprobs"]["content"]) == b["raw"]["usage"]["completion_tokens"]
        if ca["message"]["content"] != EXPECTED:
            broken += 1
            assert (a["residue"], a["phase"]) == (4, "self-hit")
    assert broken == 1
    # the broken cell: the header was overwritten, so the head was outside any turn and
    # could only end: one candidate, logprob 0
    first = scored[3]["raw"]["choices"][0]["logprobs"]["content"][0]
    assert first["token"] == "<|im_end|>" and first["logprob"] == 0.0
    assert [t["token"] for t in first["top_logprobs"]] == ["<|im_end|>"]

