"""Where data points run: the ``Backend`` protocol and the registry of backends.

The registry (``harness/settings/backend_registry.py``, below the options, so the flag
table reads it without reaching this package) is where ``sweep --backend`` takes its
choices from. Adding a backend: a module here with a class that meets ``base.Backend``,
one entry in ``BACKENDS`` (docs/architecture.md). A backend talks only to the driver (``harness.run.driver``).

- ``base.py``      the ``Backend`` protocol: ``check``, ``run``, ``describe``
- ``local.py``     ``--backend local``: slot workers over one work-stealing queue
- ``ray.py``       ``--backend ray``: one Ray task per point; lost nodes retried once
- ``ray_task.py``  what runs on a Ray node: the point's task, its slot, the worker's watchdog
- ``live.py``      ``--url``: points on a server already running, within the request budget
- ``_reaper.py``   kills a dead sweep's or Ray worker's servers (stdlib only, run by path)
"""
from __future__ import annotations

import importlib

from ..settings.backend_registry import BACKENDS, backend_names
from ..errors import UsageError
from .base import Backend

__all__ = ["Backend", "BACKENDS", "backend_names", "make_backend"]


def make_backend(name: str) -> Backend:
    try:
        module, cls = BACKENDS[name].split(":")
    except KeyError:
        raise UsageError(f"--backend: {name!r} is not valid; allowed: "
                         f"{', '.join(BACKENDS)}") from None
    return getattr(importlib.import_module(module), cls)()
