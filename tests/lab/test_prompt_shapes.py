"""Issue 50 item 4: a user's own prompt format on the lab. A header line that names the
document ("Document:", "<document>", "### Passage") is not part of it: the copy model
answers the document's lines as a trained model would (on main it copied the header too,
and a user's sweep script saw 128 of 128 cells broken). docs/lab-engine.md lists the
shapes the lab reads."""
from __future__ import annotations

import pytest

from engine.lab.model import parse_instruction
from labserver import MTP, lab_server, make_document

DOC = make_document(12, seed=5)
BODY = "\n".join(DOC)
ASK = "Reproduce the first 3 lines of the document below exactly, and nothing else."


@pytest.mark.parametrize("lines, expected", [
    ([ASK, "", "Document:", "a", "b", "c", "d"], (3, 7, 3)),
    (["Document:", "a", "b", "", "Reproduce the first line of the document above."], (1, 3, 1)),
    ([ASK, "", "<document>", "a", "b", "c", "</document>"], (3, 6, 3)),
    ([ASK, "", "### Passage", "", "a", "b"], (4, 6, 3)),
    ([ASK, "", "[TEXT]", "a", "b"], (3, 5, 3)),
    ([ASK, "", "DOCUMENT", "a", "b"], (3, 5, 3)),
    # a line of the document that only looks like a label is text when it is long
    ([ASK, "", "The first line of the document is not a label:", "b"], (2, 4, 3)),
])
def test_a_label_around_the_document_is_not_copied(lines, expected):
    assert parse_instruction(lines) == expected


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    log = tmp_path_factory.mktemp("shapes") / "srv.log"
    with lab_server(["--speculative-config", MTP, "--enable-prefix-caching",
                     "--block-size", "16", "--max-model-len", "4096"], log) as s:
        yield s


@pytest.mark.parametrize("content", [
    f"{ASK}\n\nDocument:\n{BODY}\n",
    f"{ASK}\n\n<document>\n{BODY}\n</document>",
    f"Document:\n{BODY}\n\nReproduce the first 3 lines of the document above.",
    f"{ASK}\n\n## Source text\n\n```\n{BODY}\n```\n" + " x" * 40,
])
def test_the_lab_answers_a_users_prompt_format_verbatim(srv, content):
    body = {"model": "lab-copy", "max_tokens": 400,
            "messages": [{"role": "user", "content": content}]}
    r = srv.http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "\n".join(DOC[:3])
