"""The flags that only make sense with another one, or contradict each other: one
``UsageError`` naming them, never silence (issue 27). Read off the parsed namespace of
``flags.FLAGS`` (and, where a default cannot tell, the argv that wrote it); the checks
across the whole request are ``harness/options.py``'s."""
from __future__ import annotations

import argparse
from typing import Sequence

from ..errors import UsageError
from ..judge.vocabulary import PhaseName
from ..serve.engine_help import can_fork, for_engines
from ..serve.engines import ADAPTERS, EngineName
from ..serve.isolation import IsolationName

__all__ = ["check_launch_flags", "check_flag_use"]


def check_launch_flags(ns: argparse.Namespace) -> None:
    """How servers start and what auto confirms: the flags that only make sense with
    another one (``UsageError`` naming the pair)."""
    engine = ADAPTERS.get(ns.engine)
    if ns.cache_dir and engine and not engine.compile_caches:
        raise UsageError(f"--cache-dir is for {for_engines('compile_caches')} (the {ns.engine} "
                         "engine compiles nothing)")
    if ns.launcher == "prefork" and engine and not can_fork(engine):
        raise UsageError(f"--launcher prefork: --engine {ns.engine} cannot be forked from a "
                         f"pre-imported parent ({for_engines(can_fork)} can); use --launcher "
                         "plain")
    if ns.launcher != "plain" and ns.backend != "local":
        raise UsageError(f"--launcher {ns.launcher} is for the local backend")
    if not getattr(ns, "url", None):
        for name in ("max_requests", "concurrency"):
            if getattr(ns, name, None):
                raise UsageError(f"--{name.replace('_', '-')} is for --url (a running server); "
                                 "--slots sets how many servers a sweep starts")
        if ns.isolation == IsolationName.LIVE:
            raise UsageError("--isolation live is how --url sweeps a running server: give "
                             "--url URL")
    if ns.auto_sample < 0:
        raise UsageError("--auto-sample must be at least 0")
    if ns.auto_sample != 4 and ns.isolation != IsolationName.AUTO:
        raise UsageError("--auto-sample is for --isolation auto")
    if ns.load_mode != "steady" and not ns.load:
        raise UsageError("--load-mode is for --load N (N background conversations)")


def _written(argv: Sequence[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in argv)


def check_flag_use(ns: argparse.Namespace, argv: Sequence[str], phases: Sequence[str]) -> None:
    """Flags that do not apply to what else was asked, or contradict each other: a
    ``UsageError`` naming them, never silence (issue 27). ``argv`` tells a flag written
    from its default; ``phases``: ``--phases`` as the options read it. Also
    ``check_launch_flags``."""
    check_launch_flags(ns)
    if _written(argv, "--prefix-cache") and _written(argv, "--no-prefix-cache"):
        raise UsageError("--prefix-cache and --no-prefix-cache contradict each other; give one")
    hit_phases = [p for p in phases if p != PhaseName.COLD]
    if _written(argv, "--no-prefix-cache") and hit_phases:
        raise UsageError(f"--no-prefix-cache: the {' and '.join(hit_phases)} phase cannot hit "
                         "without the prefix cache (it would be one more cold request); "
                         "give --phases cold")
    if ns.prompts:
        for name in ("--context", "--answer-lines"):
            if _written(argv, name):
                raise UsageError(f"{name} is not used with --prompts: a case is its own "
                                 "prompt, padded to each residue (docs/prompts.md)")
    if ns.allow_fewer and not ns.baseline:
        raise UsageError("--allow-fewer is for --baseline (it accepts less coverage than "
                         "the baseline's)")
    if getattr(ns, "served_config", None) and ns.engine != EngineName.CMD:
        raise UsageError("--served-config is for --engine cmd (the lab and vllm engines "
                         "report what they run)")

