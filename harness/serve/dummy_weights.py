"""vLLM's ``--load-format dummy`` found in a server command, however it is spelled: a server
with random weights gives no verdict (``engines.EngineAdapter.check`` refuses it)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Sequence

__all__ = ["dummy_weights_refusal"]

_LOAD_FORMAT = ("--load-format", "--load_format")


def _words(arg: str) -> list[str]:
    """An argument's shell words (a ``sh -c`` string); one that does not split as shell
    (an apostrophe: ``the model's``) is one word."""
    try:
        return shlex.split(arg) if " " in arg else [arg]
    except ValueError:
        return [arg]


def dummy_weights_refusal(argv: Sequence[str]) -> str | None:
    """Why a server command cannot give verdicts, or None: vLLM's ``--load-format dummy``
    (any spelling that reaches it: ``=`` or a separate value, dash or underscore, inside a
    ``sh -c`` string, or in the YAML file of ``--config``, which a flag overrides) fills
    the weights at random, so every answer is noise. ``benchmarks/gpu_cost_curve.sh``
    measures what such a server costs."""
    words = [w for a in argv for w in _words(str(a))]
    flag = from_file = None
    for i, w in enumerate(words):
        name, eq, value = w.partition("=")
        if not eq:
            value = words[i + 1] if i + 1 < len(words) else ""
        if name in _LOAD_FORMAT:
            flag = value
        elif name == "--config" and value:
            from_file = _yaml_load_format(Path(value)) or from_file
    found = flag if flag is not None else from_file
    if found is None or found.strip("'\"").lower() != "dummy":
        return None
    return ("--load-format dummy starts vLLM with random weights: every answer is noise and "
            "no verdict can be read from it (benchmarks/gpu_cost_curve.sh measures such a "
            "server's cost: cost only, no verdicts)")


def _yaml_load_format(path: Path) -> str | None:
    """``load_format`` / ``load-format`` of a vLLM ``--config`` YAML file, read as text."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"^\s*load[-_]format\s*:\s*(\S+)", text, re.MULTILINE)
    return m.group(1) if m else None
