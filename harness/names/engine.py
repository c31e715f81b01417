"""The engines a sweep can drive, by name: one row per engine, what ``--engine`` takes and
what a record's ``engine`` says. The adapter that starts and speaks to each engine is
machinery: ``serve/engines.ADAPTERS`` maps every name here to its adapter class
(tests/harness/test_layout.py checks the two name the same engines, in the same order).
A leaf: imports nothing of the harness (``harness/names/__init__.py``), so a reader that
needs only the name (the Bug B rule, the report's opening lines) does not import the
adapters.
"""
from __future__ import annotations

from enum import StrEnum

__all__ = ["ENGINES", "EngineName"]

# name -> what it is (the --engine choice's meaning; its facts are its adapter's)
ENGINES: dict[str, str] = {
    "lab": "the CPU lab engine (engine/lab), the embedded default",
    "vllm": "vllm serve from the shared presets",
    "cmd": "any OpenAI-compatible server from a user template",
    "sglang": "python -m sglang.launch_server from the shared presets",
}
# An engine as a value, one member per row: EngineName.VLLM == "vllm" (a StrEnum, written
# as the word), so comparisons name the member or ask the adapter, never the string.
EngineName = StrEnum("EngineName", [(n.upper(), n) for n in ENGINES], module=__name__)
