"""What a point's records carry about the server that ran it, typed: ``ServerFacts``.

Built when the server is up (``run/point.PointRunner.boot_config``: its boot, the
``--poison`` fill), completed by what the server reports of itself (``learn``: the
adapter's ``effective`` answer, read while the first requests go out), and written on by
what the isolation does to it between points (``serve/isolation.MACHINERY``: a reset's
failure, a restore's proof, a server no request may reach). ``record_builder`` and
``phase_judge`` read it; nothing else travels through it. It is plain data (JSON values
only): the effective-configuration read still running when the server is handed on is the
``PointRunner``'s own (``PointRunner.settle`` awaits it), never a field here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["ServerFacts"]


@dataclass
class ServerFacts:
    # what the server reports it runs (EngineAdapter.effective); None until it is read
    config: dict | None = None            # the effective configuration
    engine_version: str | None = None
    patch_status: dict | None = None
    model: str | None = None              # the model id the server serves
    config_label: str | None = None       # --engine cmd: the label of what it reported
    probe_error: str | None = None        # the report could not be read (ClientError)
    # how it booted (None on a server the sweep did not start: --url)
    boot_s: float | None = None
    server_boot: dict | None = None       # PhaseRecord.server_boot
    poison: dict | None = None            # --poison: off (and why), or each fill's proof
    fill_restores: bool = False           # the engine's fill stands for a boot (restore)
    # what the isolation did to it before this point (serve/isolation.py)
    restore: dict | None = None           # how it was returned to its just-booted state
    reset_error: str | None = None        # /reset_prefix_cache failed
    unusable: str | None = None           # why no request may go there (replaced)

    def learn(self, reported: Mapping[str, Any]) -> None:
        """What the adapter read of the server (``EngineAdapter.effective``'s keys)."""
        for key in ("config", "engine_version", "patch_status", "model", "config_label"):
            if key in reported:
                setattr(self, key, reported[key])

    def copy(self) -> "ServerFacts":
        """An independent copy (a running server's facts, one per point: ``--url``)."""
        return dataclasses.replace(self)
