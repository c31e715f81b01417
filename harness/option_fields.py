"""The fields of ``SweepOptions`` that a flag does not give as written, one row each
(``FIELDS``: the field's name and how it is read off the flags). A field without a row is
its flag's value as parsed, under the flag's ``dest``. The rows read ``Settled``: the flags
as the sweep takes them, after the cross-flag rules (``settings/flag_checks.RULES``) and
with what a ``--serve`` line or the engine decides for other flags; each of its readings
(``--url``'s target, the engine's adapter, ``--served-config``, the configurations) is
made once. The rows run in the table's order, so a mistake is found where it was before:
``--url``, the configurations, ``--modulus``, ``--reference``, ``--prompts``,
``--residues``, ``--slots``."""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from .errors import UsageError
from .names.isolation import IsolationName
from .run.live import LiveAdapter
from .serve.cmd_config import declare, parse_served_config
from .serve.engines import EngineAdapter, adapter_class
from .serve.live_target import LiveTarget, live_target
from .settings.asked import Asked
from .settings.configs import choose_residues, parse_reference, parse_slots
from .settings.flag_manifest import flags_json
from .settings.flags import DEFAULT_OUT
from .settings.sweep_options import PARTS

__all__ = ["DEFAULT_REPORTS", "FIELDS", "Settled"]

DEFAULT_REPORTS = "reports"
# what a --url sweep runs, whatever the flags' defaults say
_LIVE_FLAGS = {"isolation": IsolationName.LIVE, "backend": "live"}


@dataclass(frozen=True)
class Settled:
    """The flags as the sweep takes them: ``asked`` with what it decided for other flags
    (``Asked.decided``) written into the namespace (``ns``)."""
    asked: Asked

    @cached_property
    def ns(self) -> argparse.Namespace:   # the caller's namespace stays as parsed
        return argparse.Namespace(**{**vars(self.asked.ns), **self.asked.decided})

    @cached_property
    def live(self) -> LiveTarget | None:
        """``--url``: the running server swept (serve/live_target.py); the session reads it
        (run/live.connect)."""
        return live_target(self.ns, self.asked.given) if self.ns.url else None

    @cached_property
    def adapter(self) -> type[EngineAdapter]:
        return LiveAdapter if self.live else adapter_class(self.ns.engine)

    @cached_property
    def served(self) -> dict | None:
        """``--served-config`` (``--engine cmd``), read once."""
        return parse_served_config(getattr(self.ns, "served_config", None))

    @cached_property
    def reference(self) -> str:
        return parse_reference(self.ns.reference, self.asked.phases)

    @cached_property
    def modulus(self) -> int | None:
        """``--modulus``: N, or None for auto (each configuration's match unit)."""
        return _modulus(self.ns.modulus)

    @cached_property
    def configs(self) -> tuple:
        return tuple(declare(c, self.served) for c in self.asked.configs)

    def parts(self) -> dict[str, Any]:
        """Each part of the options: a field is its row's (``FIELDS``), else its flag's
        value (a part names it as the flag's dest)."""
        values = {name: row(self) for name, row in FIELDS.items()}

        def value(name: str) -> Any:
            return values[name] if name in values else getattr(self.ns, name)
        return {part: cls(**{f.name: value(f.name) for f in dataclasses.fields(cls)
                             if f.name in values or hasattr(self.ns, f.name)})
                for part, cls in PARTS.items()}

    def flags(self) -> dict:
        """The flags as the manifest keeps them (``flag_manifest.flags_json``)."""
        return flags_json(self.ns, **_LIVE_FLAGS if self.live else {})


def _modulus(modulus: str) -> int | None:
    if modulus == "auto":
        return None
    try:
        n = int(modulus)
    except ValueError:
        raise UsageError(f"--modulus: {modulus!r} is not valid; allowed: a positive integer "
                         "or auto") from None
    if n < 1:
        raise UsageError("--modulus must be at least 1")
    return n


def _residues(s: Settled) -> str:
    """``--residues`` as written, its syntax checked against each configuration's modulus
    now, not mid-sweep."""
    for cfg in s.configs:
        choose_residues(s.ns.residues, cfg, s.modulus, seed=s.ns.seed[0])
    return s.ns.residues


def _reports_dir(ns: argparse.Namespace) -> Path:
    """--reports-dir, else beside the results when --out is given, else reports/."""
    if ns.reports_dir:
        return Path(ns.reports_dir)
    return Path(ns.out) if ns.out else Path(DEFAULT_REPORTS)


def _logprobs(s: Settled) -> int | None:
    """--logprobs, else the engine's default (--url: the server's engine's, on connect)."""
    if s.live or s.ns.logprobs is not None:
        return s.ns.logprobs
    return s.adapter.logprobs_default


# field -> how it is read off the flags, in the order the readings are made
FIELDS: dict[str, Callable[[Settled], Any]] = {
    "live": lambda s: s.live,
    "engine": lambda s: s.adapter.name,
    "configs": lambda s: s.configs,
    "served_fields": lambda s: s.served,
    "serve_line": lambda s: s.asked.line,
    "modulus": lambda s: s.modulus,
    "phases": lambda s: s.asked.phases,
    "reference": lambda s: s.reference,
    "cases": lambda s: s.asked.cases,   # checked against --reference by a RULES row
    "residues": _residues,
    "slots": lambda s: (s.live.slots if s.live else
                        parse_slots(s.ns.slots, s.ns.gpus, s.adapter.default_slots())),
    "boot_timeout": lambda s: s.ns.boot_timeout or s.adapter.boot_timeout_s,
    "logprobs": _logprobs,
    "logprobs_default": lambda s: s.adapter.logprobs_default,
    "isolation": lambda s: _LIVE_FLAGS["isolation"] if s.live else s.ns.isolation,
    "backend": lambda s: _LIVE_FLAGS["backend"] if s.live else s.ns.backend,
    "api_key": lambda s: s.live.api_key if s.live else s.ns.api_key,
    "out": lambda s: Path(s.ns.out or DEFAULT_OUT),
    "reports_dir": lambda s: _reports_dir(s.ns),
    "seed": lambda s: s.ns.seed[0],
    "documents": lambda s: tuple(s.ns.seed),
    "engine_args": lambda s: tuple(s.ns.engine_arg),
    "junit": lambda s: Path(s.ns.junit) if s.ns.junit else None,
    "cache_dir": lambda s: Path(s.ns.cache_dir) if s.ns.cache_dir else None,
    "bisect": lambda s: bool(getattr(s.ns, "bisect", False)),
    "baseline_records": lambda s: s.asked.baseline_records,   # read once (the rule's too)
}
