"""The lab server's test-only first-chat hold (engine/lab/hold.py), which the two-node
test uses to have a point in progress on a chosen node: real servers on 127.0.0.1."""
from __future__ import annotations

import json
import threading

from engine.lab.hold import HOLD_DIR_ENV
from tests.conftest import wait_for as _wait_for
from tests.lab.labserver import lab_server, make_document

DOC = make_document(4)
PROMPT = "Reproduce the first 2 lines of the document below exactly.\n\n" + "\n".join(DOC)
ANSWER = "\n".join(DOC[:2])


def _answer(srv) -> str:
    return srv.chat(PROMPT)["choices"][0]["message"]["content"]




def test_not_armed_serves_and_consults_once(tmp_path, monkeypatch):
    hold = tmp_path / "hold"
    monkeypatch.setenv(HOLD_DIR_ENV, str(hold))
    with lab_server([], tmp_path / "a.log") as srv:
        assert _answer(srv) == ANSWER  # no directory: not armed
        hold.mkdir()
        assert _answer(srv) == ANSWER  # armed now, but only the first chat consults it
    assert list(hold.iterdir()) == []


def test_the_chosen_server_holds_until_released(tmp_path, monkeypatch):
    hold = tmp_path / "hold"
    hold.mkdir()
    (hold / "pass").write_text("1")
    monkeypatch.setenv(HOLD_DIR_ENV, str(hold))
    with lab_server([], tmp_path / "a.log") as first, lab_server([], tmp_path / "b.log") as second:
        assert _answer(first) == ANSWER  # ticket 0: let through
        assert not (hold / "holding").exists()
        got: list[str] = []
        t = threading.Thread(target=lambda: got.append(_answer(second)))
        t.start()
        try:
            held = _wait_for(lambda: (hold / "holding").exists()
                             and json.loads((hold / "holding").read_text()), 20, "holding")
            assert held == {"pid": second.proc.pid, "port": second.port, "ticket": 1}
            assert second.http.get("/health").status_code == 200  # held, not stuck
            t.join(0.5)
            assert t.is_alive() and not got  # still unanswered
            assert "test hold: first chat request held (ticket 1)" in second.log()
        finally:
            (hold / "release").touch()
            t.join(30)
        assert got == [ANSWER]
        assert _answer(first) == ANSWER and _answer(second) == ANSWER
    assert sorted(p.name for p in hold.iterdir()) == ["holding", "pass", "release",
                                                      "ticket-0", "ticket-1"]
