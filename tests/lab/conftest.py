"""Lab engine tests: real server processes on 127.0.0.1 (free ports), always cleaned up."""
from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from labserver import lab_server  # noqa: E402


def _lab_children() -> list[psutil.Process]:
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE and "engine.lab" in " ".join(c.cmdline()):
                out.append(c)
        except psutil.NoSuchProcess:
            continue
    return out


@pytest.fixture(autouse=True, scope="module")
def no_lab_server_survives():
    """After each test module (and its module-scoped servers), no lab server child lives."""
    yield
    left = _lab_children()
    for p in left:
        p.kill()
    assert not left, f"lab servers left behind: {[p.pid for p in left]}"


@pytest.fixture
def server(tmp_path):
    """server(args) -> a started LabServer, stopped at the end of the test."""
    stack = []

    def start(*args: str):
        cm = lab_server(list(args), tmp_path / f"server{len(stack)}.log")
        srv = cm.__enter__()
        stack.append(cm)
        return srv

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)  # terminates and reaps; asserts the pid is gone
