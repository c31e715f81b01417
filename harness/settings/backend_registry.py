"""The names of the backends and where each lives: the one list ``sweep --backend`` takes
its choices from. It imports nothing, so the flag declarations (``harness.settings.flags``) can
read it without reaching the protocol or the run layer (no circle through the types)."""
from __future__ import annotations

__all__ = ["BACKENDS", "LIVE_BACKEND", "backend_names"]

LIVE_BACKEND = "live"   # --url's: only a running server's sweep has it (flag_checks.RULES)

# name -> "module:class", imported only when that backend is made (Ray's module imports
# Ray itself only when it runs; the CLI's --backend choices need no backend imported).
BACKENDS: dict[str, str] = {"local": "harness.backends.local:LocalBackend",
                            "ray": "harness.backends.ray:RayBackend",
                            # sweep --url: a running server, nothing started
                            LIVE_BACKEND: "harness.backends.live:LiveBackend"}


def backend_names() -> tuple[str, ...]:
    return tuple(BACKENDS)
