"""The real serving stack: vLLM launch commands from the shared presets, the effective
configuration read back from a server's log, and residue-lab's patches as a vLLM plugin.

Nothing here imports vLLM at import time; only the patches touch it, when applied.

Harness surface::

    argv, env = build_command(cfg, port=8001, model="/models/x", gpu="0")
    effective = parse_effective_config(log_text)       # incl. effective["patch_status"]
    diffs = compare_effective(cfg.identity(), effective)
"""
from __future__ import annotations

from .effective import compare_effective, parse_effective_config, patch_status_from_log
from .launch import (
    PATCHES_ENV,
    PLUGIN_GROUP,
    PLUGIN_NAME,
    PLUGIN_TARGET,
    HybridOptions,
    LaunchError,
    LaunchSpec,
    build_command,
    build_launch,
    speculative_config_json,
    write_plugin_dist_info,
)


def patch_status() -> dict[str, str]:
    """Status of residue-lab's vLLM patches in this process (imports vLLM)."""
    from .patches import patch_status as _status

    return _status()


__all__ = [
    "PATCHES_ENV", "PLUGIN_GROUP", "PLUGIN_NAME", "PLUGIN_TARGET", "HybridOptions",
    "LaunchError", "LaunchSpec", "build_command", "build_launch", "compare_effective",
    "parse_effective_config", "patch_status", "patch_status_from_log", "speculative_config_json",
    "write_plugin_dist_info",
]
