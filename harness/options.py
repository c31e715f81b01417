"""argv -> ``SweepOptions``: every sweep flag validated across flags, once.

``settings/flags.py`` declares each flag and parses one at a time; this module checks what only
several flags together can say (``--slots`` with ``--gpus``, ``--bisect`` with
``--baseline``, ...) and builds the options every way of running a sweep shares: the
command line (``cli``), ``--resume`` (the run's own command line, ``run/resume.py``),
``sweep explain`` (one configuration per rung) and a Python caller
(``harness.options_from_argv``). A user mistake is a ``UsageError`` (exit 2) here, never
per point.
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
from pathlib import Path
from typing import Any, Sequence

from .run import live as attached
from .backends import make_backend
from .settings.configs import (choose_residues, expand_matrix, parse_phases, parse_prompts,
                               parse_reference, parse_slots)
from .settings.sweep_options import PARTS, SweepOptions
from .serve.engines import adapter_class
from .serve.cmd_config import declare, parse_served_config
from .errors import UsageError
from .settings.flags import DEFAULT_OUT
from .settings.flag_checks import Asked, check_flag_use
from .settings.flag_manifest import explicit_flags, flags_json, parse_flags
from .settings.flags import matrix_axes
from .run.resume import resumed_namespace
from .serve.serve_line import parse_serve_line, vllm_spellings
from .records.store import ResultStore, StoreError
from .names.isolation import IsolationName

__all__ = ["DEFAULT_OUT", "DEFAULT_REPORTS", "build_options", "parse_sweep_argv",
           "options_from_argv"]

DEFAULT_REPORTS = "reports"


def build_options(ns: argparse.Namespace, argv: Sequence[str],
                  written: dict[str, Any] | None = None) -> SweepOptions:
    """Every flag validated into ``SweepOptions``; the backend checks what it needs.
    ``written``: the flags ``argv`` wrote, as ``flag_manifest.parse_flags`` read them with
    ``ns`` (else read from ``argv`` here)."""
    written = explicit_flags(argv) if written is None else written
    line = parse_serve_line(ns.serve) if ns.serve else None   # --serve LINE, read once
    phases = parse_phases(ns.phases)   # --phases, read once
    built: dict[str, tuple] = {}

    def configs_and_decided() -> tuple:
        if "configs" not in built:
            built["configs"] = _configs(ns, written, line)
        return built["configs"]

    # every cross-flag rule, engine's too, before anything runs (settings/flag_checks.RULES)
    notes = check_flag_use(Asked(ns, written, phases, line,
                                 configs_of=lambda: configs_and_decided()[0]))
    # --url: a running server (harness/run/live.py); the session reads it (live.connect)
    live = attached.live_target(ns, written) if ns.url else None
    seeds = tuple(ns.seed)
    configs, decided = configs_and_decided()
    ns = argparse.Namespace(**{**vars(ns), **decided})   # the caller's stays as parsed
    served = parse_served_config(getattr(ns, "served_config", None))   # --engine cmd
    configs = [declare(c, served) for c in configs]
    modulus = _modulus(ns.modulus)
    reference = parse_reference(ns.reference, phases)
    cases = parse_prompts(ns.prompts, ns.case, reference)
    for cfg in configs:  # residue syntax errors surface now, not mid-sweep
        choose_residues(ns.residues, cfg, modulus, seed=seeds[0])
    engine = attached.LiveAdapter if live else adapter_class(ns.engine)
    derived = dict(   # the fields a flag does not give as it is
        engine=engine.name, configs=tuple(configs), modulus=modulus, phases=phases,
        reference=reference, live=live, cases=cases,
        served_fields=served, serve_line=line,
        slots=live.slots if live else parse_slots(ns.slots, ns.gpus, engine.default_slots()),
        boot_timeout=ns.boot_timeout or engine.boot_timeout_s,
        out=Path(ns.out or DEFAULT_OUT), reports_dir=_reports_dir(ns),
        seed=seeds[0], documents=seeds, engine_args=tuple(ns.engine_arg),
        junit=Path(ns.junit) if ns.junit else None,
        cache_dir=Path(ns.cache_dir) if ns.cache_dir else None,
        bisect=bool(getattr(ns, "bisect", False)),
        logprobs=engine.logprobs_default if ns.logprobs is None else ns.logprobs,
        logprobs_default=engine.logprobs_default)
    if live:   # what --url runs; the logprobs default is the server's engine's (connect)
        derived.update(_LIVE_FLAGS, api_key=live.api_key, logprobs=ns.logprobs)
    opts = SweepOptions(**_parts(ns, derived), flag_notes=notes, argv=tuple(argv),
                        flags=flags_json(ns, **_LIVE_FLAGS if live else {}))
    make_backend(opts.running.backend).check(opts)  # e.g. ray without the extra: exit 2, now
    return opts


def _parts(ns: argparse.Namespace, derived: dict[str, Any]) -> dict[str, Any]:
    """Each part of the options: a field is ``derived``'s, else its flag's value (a part
    names it as the flag's dest)."""
    def value(name: str) -> Any:
        return derived[name] if name in derived else getattr(ns, name)
    return {part: cls(**{f.name: value(f.name) for f in dataclasses.fields(cls)
                         if f.name in derived or hasattr(ns, f.name)})
            for part, cls in PARTS.items()}


# what a --url sweep runs, whatever the flags' defaults say
_LIVE_FLAGS = {"isolation": IsolationName.LIVE, "backend": "live"}


def _configs(ns: argparse.Namespace, written: dict[str, Any], line) -> tuple[list, dict]:
    """The configurations the flags ask for, and what a ``--serve`` line decides for
    other flags: none for ``--url`` (the server's own, read when the session connects)."""
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


def serve_configs(ns: argparse.Namespace, written: dict[str, Any], line) -> tuple[list, dict]:
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


def _modulus(modulus: str) -> int | None:
    if modulus == "auto":   # --modulus auto: from the configuration's match unit
        return None
    try:
        n = int(modulus)
    except ValueError:
        raise UsageError(f"--modulus: {modulus!r} is not valid; allowed: a positive integer or auto") from None
    if n < 1:
        raise UsageError("--modulus must be at least 1")
    return n


def _reports_dir(ns: argparse.Namespace) -> Path:
    """--reports-dir, else beside the results when --out is given, else reports/."""
    if ns.reports_dir:
        return Path(ns.reports_dir)
    return Path(ns.out) if ns.out else Path(DEFAULT_REPORTS)


def parse_sweep_argv(argv: Sequence[str]) -> SweepOptions:
    """The sweep verb's argv -> its options (nothing else reads the command line again).
    ``--resume RUN_ID`` is the same run: the plan comes from its manifest
    (``run/resume.py``), only a few flags may change."""
    argv = vllm_spellings(list(argv))   # -cc, --speculative-config, --base-url, ...
    ns, written = parse_flags(argv)   # the one parse of the command line
    if ns.resume:
        store = ResultStore(ns.out or DEFAULT_OUT, ns.resume, create=False)
        try:
            manifest = store.read_manifest()
        except StoreError as e:
            raise UsageError(f"--resume: {e}") from None
        ns, written = resumed_namespace(ns.resume, written, manifest)
        if Path(ns.out or DEFAULT_OUT) != store.out_dir:  # the run was found elsewhere
            ns.out = str(store.out_dir)
        argv = shlex.split(manifest.command)[1:] if manifest.command else []
    return build_options(ns, argv, written)


def options_from_argv(argv: Sequence[str]) -> SweepOptions:
    """``SweepOptions`` from sweep flags, as the command line takes them, e.g.
    ``options_from_argv(["--residues", "3-5", "--slots", "2"])``."""
    return parse_sweep_argv(argv)
