"""argv -> ``SweepOptions``: every sweep flag validated across flags, once.

``settings/flags.py`` declares each flag and parses one at a time. Here the parsed flags
become ``settings/asked.Asked``; what only several flags together can say is checked
(``settings/flag_checks.RULES``: ``--slots`` with ``--gpus``, ``--bisect`` with
``--baseline``, ...), and each field the flags do not give as written is read
(``option_fields.FIELDS``). Every way of running a sweep builds its options here: the
command line (``cli``), ``--resume`` (the run's own command line, ``run/resume.py``),
``sweep explain`` (one configuration per rung) and a Python caller
(``harness.options_from_argv``). A user mistake is a ``UsageError`` (exit 2) here, never
per point.
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any, Sequence

from .backends import make_backend
from .errors import UsageError
from .option_fields import DEFAULT_REPORTS, Settled
from .records.store import ResultStore, StoreError
from .run.resume import resumed_namespace
from .serve.serve_line import vllm_spellings
from .settings.asked import Asked
from .settings.flag_checks import check_flag_use
from .settings.flag_manifest import explicit_flags, parse_flags
from .settings.flags import DEFAULT_OUT
from .settings.sweep_options import SweepOptions

__all__ = ["DEFAULT_OUT", "DEFAULT_REPORTS", "build_options", "parse_sweep_argv",
           "options_from_argv"]


def build_options(ns: argparse.Namespace, argv: Sequence[str],
                  written: dict[str, Any] | None = None) -> SweepOptions:
    """Every flag validated into ``SweepOptions``; the backend checks what it needs.
    ``written``: the flags ``argv`` wrote, as ``flag_manifest.parse_flags`` read them with
    ``ns`` (else read from ``argv`` here)."""
    asked = Asked(ns, explicit_flags(argv) if written is None else written)
    # every cross-flag rule, engine's too, before anything runs (settings/flag_checks.RULES)
    notes = check_flag_use(asked)
    settled = Settled(asked)   # each field the flags do not give as written: option_fields
    opts = SweepOptions(**settled.parts(), flag_notes=notes, argv=tuple(argv),
                        flags=settled.flags())
    make_backend(opts.running.backend).check(opts)  # e.g. ray without the extra: exit 2, now
    return opts


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
            ns = argparse.Namespace(**{**vars(ns), "out": str(store.out_dir)})   # a new one
        argv = shlex.split(manifest.command)[1:] if manifest.command else []
    return build_options(ns, argv, written)


def options_from_argv(argv: Sequence[str]) -> SweepOptions:
    """``SweepOptions`` from sweep flags, as the command line takes them, e.g.
    ``options_from_argv(["--residues", "3-5", "--slots", "2"])``."""
    return parse_sweep_argv(argv)
