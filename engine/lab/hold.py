"""Test only: hold a server's first chat request until the test lets it go.

A test that must act while a data point is running on one server (kill its node,
interrupt the sweep) cannot count on the point being slow: a fast machine finishes it
first. With ``RESIDUE_LAB_TEST_HOLD_DIR`` set in the server's environment, the server
consults that directory once, at its first ``POST /v1/chat/completions``:

- the directory does not exist: not armed, the request is served as usual;
- it exists: the server takes the next ticket (``ticket-0``, ``ticket-1``, ...: files
  created with ``O_EXCL``, so every server sharing the directory counts once). The
  server whose ticket equals the integer in ``pass`` (0 when that file is absent)
  writes ``holding`` (JSON: ``pid``, ``port``, ``ticket``) and keeps the request waiting
  until a file ``release`` appears, or for ever; every other server serves as usual.

While ``holding`` exists, the test knows a point is in progress on that server, for as
long as it needs. SIGTERM still ends a held server at once (``serve.py``). The harness
passes its environment through to every server it starts, so never set this outside a
test.
"""
from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Awaitable, Callable

from ._log import log

__all__ = ["HOLD_DIR_ENV", "around"]

HOLD_DIR_ENV = "RESIDUE_LAB_TEST_HOLD_DIR"
CHAT_PATH = "/v1/chat/completions"
RELEASE_POLL_S = 0.05
MAX_TICKETS = 10_000

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]


def around(app: ASGIApp) -> ASGIApp:
    """``app`` itself where the variable is unset (the normal case); else ``app`` behind
    the first-chat hold."""
    where = os.environ.get(HOLD_DIR_ENV)
    return _FirstChatHold(app, Path(where)) if where else app


class _FirstChatHold:
    def __init__(self, app: ASGIApp, where: Path) -> None:
        self.app, self.where, self.consulted = app, where, False

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if (not self.consulted and scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"] == CHAT_PATH):
            self.consulted = True  # set before any await: only one request consults
            if self._holds(scope):
                await self._until_released()
        await self.app(scope, receive, send)

    def _holds(self, scope: dict[str, Any]) -> bool:
        ticket = _take_ticket(self.where)
        if ticket is None or ticket != _pass_count(self.where):
            return False
        port = (scope.get("server") or (None, None))[1]
        tmp = self.where / f".holding-{os.getpid()}"
        tmp.write_text(json.dumps({"pid": os.getpid(), "port": port, "ticket": ticket}))
        os.replace(tmp, self.where / "holding")  # appears whole: the test reads it at once
        log("WARNING", "hold.py", f"test hold: first chat request held (ticket {ticket}) "
            f"until {self.where / 'release'} exists")
        return True

    async def _until_released(self) -> None:
        release = self.where / "release"
        while not release.exists():
            await asyncio.sleep(RELEASE_POLL_S)


def _take_ticket(where: Path) -> int | None:
    """The lowest free ticket number, now this server's; None when not armed."""
    for i in range(MAX_TICKETS):
        try:
            fd = os.open(where / f"ticket-{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        except FileNotFoundError:  # no directory: not armed
            return None
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        return i
    return None


def _pass_count(where: Path) -> int:
    try:
        return int((where / "pass").read_text().strip())
    except FileNotFoundError:
        return 0
