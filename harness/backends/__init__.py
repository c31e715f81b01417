"""Where data points run: the ``Backend`` protocol and the registry of backends.

The registry is also where ``sweep --backend`` takes its choices from. Adding a backend:
a module here with a class that meets ``base.Backend``, one entry in ``BACKENDS``
(docs/architecture.md). A backend talks only to the driver (``harness.run.driver``).
"""
from __future__ import annotations

import importlib

from ..errors import UsageError
from .base import Backend

__all__ = ["Backend", "BACKENDS", "backend_names", "make_backend"]


# name -> "module:class", imported only when that backend is made (Ray's module imports
# Ray itself only when it runs; the CLI's --backend choices need no backend imported).
BACKENDS: dict[str, str] = {"local": "harness.backends.local:LocalBackend",
                            "ray": "harness.backends.ray:RayBackend"}


def backend_names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def make_backend(name: str) -> Backend:
    try:
        module, cls = BACKENDS[name].split(":")
    except KeyError:
        raise UsageError(f"--backend: {name!r} is not valid; allowed: "
                         f"{', '.join(BACKENDS)}") from None
    return getattr(importlib.import_module(module), cls)()
