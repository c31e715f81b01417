"""Shared fixtures: real server processes on 127.0.0.1, and a check that none survive."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
FAKE_ENGINE = ROOT / "tests" / "servers" / "fake_engine.py"


def processes_mentioning(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if marker in " ".join(p.info["cmdline"] or []):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    """A per-test copy of the fixture tokenizer: its path marks this test's servers."""
    d = tmp_path / "tok"
    shutil.copytree(FIXTURES / "tokenizer", d)
    return d


@pytest.fixture
def no_leftovers(tmp_path: Path):
    """Fails the test if any process whose command line names this test's tmp dir is
    still alive afterwards (a teardown bug)."""
    yield
    left = processes_mentioning(str(tmp_path))
    for p in left:
        p.kill()
    assert not left, f"server processes left behind: {[p.pid for p in left]}"


def fake_cmd(tok_dir: Path, *extra: str) -> str:
    return " ".join([sys.executable, str(FAKE_ENGINE), "--port", "{port}", "--model",
                     str(tok_dir), *extra])


def wait_for(cond, timeout: float, what: str):
    """``cond()``'s first truthy value, polled every 10 ms for at most ``timeout`` seconds;
    an ``AssertionError`` naming ``what`` when it never comes (a bounded readiness wait)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := cond():
            return got
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
