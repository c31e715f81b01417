"""The flags that only make sense with another one, or contradict each other, as one table
(``RULES``): each ``Rule`` names the flags it relates, when they are broken together, and
the one ``UsageError`` line that says so, never silence (issue 27). Read off the parsed
namespace of ``flags.FLAGS`` (and, where a default cannot tell, the argv that wrote it);
``options.build_options`` checks every rule, in the table's order, before anything runs.
What only a whole request can tell (a ``--serve`` line, ``--poison on`` on an engine) stays
in ``harness/options.py``."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import UsageError
from ..judge.vocabulary import PhaseName
from ..names.history import HISTORIES
from .flag_values import split
from ..serve.engine_help import can_fork, for_engines
from ..serve.engines import ADAPTERS, EngineName
from ..serve.isolation import IsolationName

__all__ = ["Asked", "Rule", "RULES", "check_flag_use", "rule_of"]

HISTORY_ROWS = {h.name: h for h in HISTORIES}


@dataclass(frozen=True)
class Asked:
    """What a rule reads: the parsed flags, the argv that wrote them, ``--phases`` read."""
    ns: argparse.Namespace
    argv: Sequence[str] = ()
    phases: Sequence[str] = ()

    def written(self, name: str) -> bool:
        """``name`` is on the command line (a default cannot tell it from one written)."""
        return any(a == name or a.startswith(name + "=") for a in self.argv)

    def __getattr__(self, dest: str):
        return getattr(self.ns, dest, None)

    @property
    def hit_phases(self) -> list[str]:
        return [p for p in self.phases if p != PhaseName.COLD]


@dataclass(frozen=True)
class Rule:
    flags: tuple[str, ...]                 # the flags it relates, as the user writes them
    broken: Callable[[Asked], bool]
    says: Callable[[Asked], str]

    def check(self, asked: Asked) -> None:
        if self.broken(asked):
            raise UsageError(self.says(asked))


def _engine(a: Asked):
    return ADAPTERS.get(a.engine)


def _first_written(a: Asked, names: Sequence[str]) -> str:
    return next(n for n in names if a.written(n))


_PROMPTS_ONLY = ("--context", "--answer-lines")

RULES: tuple[Rule, ...] = (
    Rule(("--url", "--prompts", "--seed"),
         lambda a: bool(a.url) and (bool(a.prompts) or len(a.seed or ()) > 1),
         lambda a: "--url gives every point a document of its own: --prompts cases and "
                   "--seed lists repeat a text across points, which a live server caches"),
    Rule(("--url", "--load"), lambda a: bool(a.url) and bool(a.load),
         lambda a: "--load sends background conversations of its own; on a running service "
                   "that is added traffic, so --url does not send it"),
    Rule(("--url", "--reference"),
         lambda a: bool(a.url) and a.reference not in ("passage", "cold"),
         lambda a: f"--reference {a.reference}: --url judges each point against its own "
                   "document (passage) or its cold answer (cold)"),
    Rule(("--server-cmd", "--engine"),
         lambda a: a.engine != EngineName.CMD and bool(a.server_cmd),
         lambda a: "--server-cmd is only for --engine cmd"),
    Rule(("--ray-address", "--backend"),
         lambda a: bool(a.ray_address) and a.backend != "ray",
         lambda a: "--ray-address is only for --backend ray"),
    Rule(("--slots", "--gpus"), lambda a: bool(a.slots and a.gpus),
         lambda a: "--slots and --gpus are exclusive: --gpus gives one slot per GPU"),
    Rule(("--cache-dir", "--engine"),
         lambda a: bool(a.cache_dir) and bool(_engine(a)) and not _engine(a).compile_caches,
         lambda a: f"--cache-dir is for {for_engines('compile_caches')} (the {a.engine} "
                   "engine compiles nothing)"),
    Rule(("--launcher", "--engine"),
         lambda a: a.launcher == "prefork" and bool(_engine(a)) and not can_fork(_engine(a)),
         lambda a: f"--launcher prefork: --engine {a.engine} cannot be forked from a "
                   f"pre-imported parent ({for_engines(can_fork)} can); use --launcher plain"),
    Rule(("--launcher", "--backend"), lambda a: a.launcher != "plain" and a.backend != "local",
         lambda a: f"--launcher {a.launcher} is for the local backend"),
    Rule(("--max-requests", "--url"), lambda a: not a.url and bool(a.max_requests),
         lambda a: "--max-requests is for --url (a running server); --slots sets how many "
                   "servers a sweep starts"),
    Rule(("--concurrency", "--url"), lambda a: not a.url and bool(a.concurrency),
         lambda a: "--concurrency is for --url (a running server); --slots sets how many "
                   "servers a sweep starts"),
    Rule(("--isolation", "--url"), lambda a: not a.url and a.isolation == IsolationName.LIVE,
         lambda a: "--isolation live is how --url sweeps a running server: give --url URL"),
    Rule(("--auto-sample",), lambda a: a.auto_sample < 0,
         lambda a: "--auto-sample must be at least 0"),
    Rule(("--auto-sample", "--isolation"),
         lambda a: a.auto_sample != 4 and a.isolation != IsolationName.AUTO,
         lambda a: "--auto-sample is for --isolation auto"),
    Rule(("--load-mode", "--load"), lambda a: a.load_mode != "steady" and not a.load,
         lambda a: "--load-mode is for --load N (N background conversations)"),
    Rule(("--prefix-cache", "--no-prefix-cache"),
         lambda a: a.written("--prefix-cache") and a.written("--no-prefix-cache"),
         lambda a: "--prefix-cache and --no-prefix-cache contradict each other; give one"),
    Rule(("--no-prefix-cache", "--phases"),
         lambda a: a.written("--no-prefix-cache") and bool(a.hit_phases),
         lambda a: f"--no-prefix-cache: the {' and '.join(a.hit_phases)} phase cannot hit "
                   "without the prefix cache (it would be one more cold request); give "
                   "--phases cold"),
    Rule(("--prompts", *_PROMPTS_ONLY),
         lambda a: bool(a.prompts) and any(a.written(n) for n in _PROMPTS_ONLY),
         lambda a: f"{_first_written(a, _PROMPTS_ONLY)} is not used with --prompts: a case "
                   "is its own prompt, padded to each residue (docs/prompts.md)"),
    Rule(("--allow-fewer", "--baseline"), lambda a: bool(a.allow_fewer) and not a.baseline,
         lambda a: "--allow-fewer is for --baseline (it accepts less coverage than the "
                   "baseline's)"),
    Rule(("--served-config", "--engine"),
         lambda a: bool(a.served_config) and a.engine != EngineName.CMD,
         lambda a: "--served-config is for --engine cmd (the lab and vllm engines report "
                   "what they run)"),
    Rule(("--seed", "--prompts"), lambda a: len(a.seed or ()) > 1 and bool(a.prompts),
         lambda a: "--seed lists are documents and --prompts cases have none: give one --seed"),
    Rule(("--bisect", "--baseline"), lambda a: bool(a.bisect) and bool(a.baseline),
         lambda a: "--bisect and --baseline are exclusive: a bisect judges each build alone"),
    Rule(("--async-scheduling", "--engine"),
         lambda a: bool(a.async_scheduling) and not getattr(_engine(a), "async_scheduling", True),
         lambda a: f"--async-scheduling: --engine {a.engine} has no switch for it (vLLM's "
                   "--async-scheduling / --no-async-scheduling)"),
    Rule(("--history", "--load"),
         lambda a: bool(a.load) and any(h != "none" for h in split(a.history or "")),
         lambda a: "--history and --load are exclusive: a history proves what ran before the "
                   "measured request, and background load would be part of it"),
    Rule(("--history", "--phases"), lambda a: bool(_history_missing(a)),
         lambda a: "--history {0} runs at the {1} phase: --phases must have {2}".format(
             *_history_missing(a), ", ".join(dict.fromkeys(("cold", _history_missing(a)[1]))))),
    Rule(("--poison", "--engine"),   # an engine that refuses the fill outright (SGLang)
         lambda a: a.poison == "on" and bool(getattr(_engine(a), "poison_refusal", None)),
         lambda a: f"--poison on: --engine {a.engine}: {_engine(a).poison_refusal}; use "
                   "--poison auto or off"),
)


def _history_missing(a: Asked) -> tuple[str, str] | None:
    """(history, its phase) for the first ``--history`` whose phases ``--phases`` lacks: each
    runs at its row's phase (names/history.py), and those at a hit after the cold one."""
    for name in split(a.history or ""):
        row = HISTORY_ROWS.get(name)
        if row is None or row.at is None:
            continue
        if row.at not in a.phases or PhaseName.COLD not in a.phases:
            return name, row.at
    return None


def check_flag_use(ns: argparse.Namespace, argv: Sequence[str], phases: Sequence[str]) -> None:
    """Every rule of ``RULES``, in order: the first broken one is a ``UsageError``.
    ``argv`` tells a flag written from its default; ``phases``: ``--phases`` as the options
    read it."""
    asked = Asked(ns, tuple(argv), tuple(phases))
    for rule in RULES:
        rule.check(asked)


def rule_of(*flags: str) -> Rule:
    """The rule relating exactly ``flags`` (another command's parser checks it too:
    ``sweep explain``'s ``--slots`` / ``--gpus``)."""
    return next(r for r in RULES if r.flags == flags)
