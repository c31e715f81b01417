"""The fake test engine (tests/servers/fake_engine.py), answering every prompt with text
chosen to break a markdown report or a GitHub issue: table pipes, backticks, HTML, a
script tag, @mentions, #1 / GH-2 references, a URL, a newline, a control character.

The answer is swapped in only when this file runs as the server: a test imports it for
``HOSTILE``, and an import that replaced ``fake_engine.copy_answer`` changed every
in-process server of that pytest worker after it (the misbehaving engine's in-process
cases answered this text: issue 38)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "servers"))
import fake_engine  # noqa: E402

HOSTILE = ("| a | b | `tick` ```fence``` <script>alert('x')</script> <b>bold</b> "
           "cc @someone fixes #1 GH-2 https://evil.example/x\nnext line \x1b[31m")


def main() -> None:
    fake_engine.copy_answer = lambda content: HOSTILE
    fake_engine.main()


if __name__ == "__main__":
    main()
