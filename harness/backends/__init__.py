"""Where data points run: the ``Backend`` protocol and the registry of backends.

The registry is also where ``sweep --backend`` takes its choices from. Adding a backend:
a module here with a class that meets ``base.Backend``, one entry in ``BACKENDS``
(docs/architecture.md). A backend talks only to the driver (``harness.run.driver``).
"""
from __future__ import annotations

from typing import Callable

from ..errors import UsageError
from .base import Backend

__all__ = ["Backend", "BACKENDS", "backend_names", "make_backend"]


def _local() -> Backend:
    from .local import LocalBackend
    return LocalBackend()


def _ray() -> Backend:
    from .ray import RayBackend  # imports Ray itself only when it runs
    return RayBackend()


BACKENDS: dict[str, Callable[[], Backend]] = {"local": _local, "ray": _ray}


def backend_names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def make_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]()
    except KeyError:
        raise UsageError(f"--backend: {name!r} is not valid; allowed: "
                         f"{', '.join(BACKENDS)}") from None
