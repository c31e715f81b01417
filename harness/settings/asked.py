"""``Asked``: a sweep's flags as the command line asked them, each reading made once, on
first use: the parsed namespace (``flags.FLAGS``), the flags the command line wrote
(``flag_manifest.parse_flags``: no argv is scanned here), ``--phases`` and a ``--serve``
line read, the configurations the flags expand to, what a ``--serve`` line or the engine
decides for other flags, ``--prompts``' cases and ``--baseline``'s records. The
cross-flag rules (``flag_checks.RULES``) read it, and so do the options' fields
(``harness/option_fields.FIELDS``)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

from ..names.phase import PhaseName
from ..prompts.cases import PromptCase, load_cases, select_cases
from ..records.phase_record import PhaseRecord
from ..records.store import StoreError, load_records
from ..serve.engines import adapter_class
from ..serve.serve_line import ServeLine, parse_serve_line
from . import flag_facts as facts
from .configs import expand_matrix
from .flag_values import parse_phases, split
from .flags import DEFAULT_OUT, matrix_axes

__all__ = ["Asked", "serve_configs"]


@dataclass(frozen=True)
class Asked:
    """What the command line asked, as read: ``ns`` the parsed flags, ``given`` the flags
    it wrote (``{name: value}``); a flag's value is ``asked.<dest>`` (None where the
    command has no such flag)."""
    ns: argparse.Namespace
    given: Mapping[str, Any] = field(default_factory=dict)

    def written(self, name: str) -> bool:
        """``name`` is on the command line (a default cannot tell it from one written)."""
        return name in self.given

    def __getattr__(self, dest: str):
        return getattr(self.ns, dest, None)

    @cached_property
    def line(self) -> ServeLine | None:
        """``--serve LINE``, read once (serve/serve_line.py)."""
        return parse_serve_line(self.ns.serve) if getattr(self.ns, "serve", None) else None

    @cached_property
    def phases(self) -> tuple[str, ...]:
        """``--phases``, read once."""
        return parse_phases(self.ns.phases)

    @property
    def hit_phases(self) -> list[str]:
        return [p for p in self.phases if p != PhaseName.COLD]

    @cached_property
    def _matrix(self) -> tuple[list, dict[str, Any]]:
        return _configs(self.ns, self.given, self.line)

    @property
    def configs(self) -> list[Any]:
        """The configurations the flags ask for (none for ``--url``: the server's own, read
        when the session connects)."""
        return self._matrix[0]

    @property
    def decided(self) -> dict[str, Any]:
        """What a ``--serve`` line or the engine decides for other flags (``{dest: value}``):
        the line's engine, model and GPU group, the engine's default ``--patches``."""
        return self._matrix[1]

    @cached_property
    def cases(self) -> tuple[PromptCase, ...]:
        """``--prompts FILE``'s cases (``--case`` picks some), read once: a rule checks them
        against ``--reference`` and the options carry them."""
        if not getattr(self.ns, "prompts", None):   # --case alone: refused by a rule
            return ()
        return select_cases(load_cases(self.ns.prompts), split(self.ns.case), self.ns.prompts)

    @cached_property
    def baseline_records(self) -> tuple[PhaseRecord, ...] | None:
        """``--baseline``'s records, read once: the rule matching them against the
        configurations and the session's gate (``OutputsPart.baseline_records``) read this
        reading. None: no ``--baseline``, or one that cannot be read (the session's check
        says why, ``residue_sweep.Sweep.check``)."""
        if not getattr(self.ns, "baseline", None):
            return None
        try:
            return tuple(load_records([self.ns.baseline], self.ns.out or DEFAULT_OUT))
        except StoreError:
            return None

    @cached_property
    def baseline_unmatched(self) -> str | None:
        """``flag_facts.baseline_unmatched``, once: its rule's test and line both read it
        (off ``baseline_records``)."""
        return facts.baseline_unmatched(self)


def _configs(ns: argparse.Namespace, written: Mapping[str, Any],
             line: ServeLine | None) -> tuple[list, dict[str, Any]]:
    if ns.url:
        return [], {}
    if line is not None:   # --serve LINE: the line's one configuration (serve/serve_line.py)
        return serve_configs(ns, written, line)
    decided: dict[str, Any] = {}
    if "--patches" not in written and adapter_class(ns.engine).default_patches:
        # the engine's own (SGLang: none), kept in the manifest's flags for explain/resume
        decided["patches"] = adapter_class(ns.engine).default_patches
        ns = argparse.Namespace(**{**vars(ns), **decided})
    return expand_matrix(engine=ns.engine, model=ns.model, prefix_cache=ns.prefix_cache,
                         axes=matrix_axes(ns), context=ns.context,
                         max_tokens=ns.max_tokens), decided


def serve_configs(ns: argparse.Namespace, written: Mapping[str, Any],
                  line: ServeLine) -> tuple[list, dict[str, Any]]:
    """--serve LINE: the line's configuration, one per --patches set (vLLM: none unless
    asked, your vLLM as it is; the lab: the line's --patches), and the flags the line
    decides (engine, model, a GPU group). What the flags beside it may not say (another
    configuration, GPU groups of another TP size) is ``RULES``'."""
    patches = (matrix_axes(ns)["patches"] if "--patches" in written
               else [line.values.get("patches", "none")])
    configs = [line.config(p) for p in patches]
    decided = {"engine": line.engine, "model": line.model}
    tp = line.tensor_parallel_size
    if tp > 1 and not ns.gpus:
        decided["gpus"] = "+".join(str(g) for g in range(tp))
    return configs, decided
