"""Shared fixtures for the report tests: synthetic runs written as JSONL files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import synth

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"


@pytest.fixture
def write_run(tmp_path):
    """write_run(name, records, manifest=None) -> path of a results JSONL (+ manifest)."""
    def _write(name, records, manifest=None):
        path = synth.write_jsonl(tmp_path / f"{name}.jsonl", records)
        if manifest is not None:
            (tmp_path / f"{name}.manifest.json").write_text(json.dumps(manifest))
        return path
    return _write
