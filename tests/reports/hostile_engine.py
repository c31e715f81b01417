"""The fake test engine (tests/servers/fake_engine.py), answering every prompt with text
chosen to break a markdown report or a GitHub issue: table pipes, backticks, HTML, a
script tag, @mentions, #1 / GH-2 references, a URL, a newline, a control character."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "servers"))
import fake_engine  # noqa: E402

HOSTILE = ("| a | b | `tick` ```fence``` <script>alert('x')</script> <b>bold</b> "
           "cc @someone fixes #1 GH-2 https://evil.example/x\nnext line \x1b[31m")

fake_engine.copy_answer = lambda content: HOSTILE

if __name__ == "__main__":
    fake_engine.main()
