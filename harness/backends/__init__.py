"""Where data points run: the ``Backend`` protocol and the registry of backends.

The registry is also where ``sweep --backend`` takes its choices from. Adding a backend:
a module here with a class that meets ``base.Backend``, one entry in ``BACKENDS``
(docs/architecture.md). A backend talks only to the driver (``harness.run.driver``).
"""
from __future__ import annotations

import importlib

from ..errors import UsageError
from .base import Backend
from .registry import BACKENDS, backend_names

__all__ = ["Backend", "BACKENDS", "backend_names", "make_backend"]


def make_backend(name: str) -> Backend:
    try:
        module, cls = BACKENDS[name].split(":")
    except KeyError:
        raise UsageError(f"--backend: {name!r} is not valid; allowed: "
                         f"{', '.join(BACKENDS)}") from None
    return getattr(importlib.import_module(module), cls)()
