"""``--resume RUN_ID``: the same run, from its manifest's options (versioned JSON,
``settings/flag_manifest.flags_json``; a manifest from before them: its command line).

A resumed run keeps its plan: what it measures and on which configurations comes from the
manifest. Only the flags in ``MAY_CHANGE`` (each ``Flag(..., resume=True)``: where files
go, how many slots, the progress bar, the request timeout) take the new command line's
value; any other flag written on the resume command line that differs from the
manifest's is a ``UsageError`` naming the flag and the manifest's value, never silently
dropped.
"""
from __future__ import annotations

import argparse
from typing import Any

from ..errors import UsageError
from ..records.manifest import RunManifest
from ..settings.flag_manifest import namespace_of
from ..settings.flags import FLAGS, dest_of

__all__ = ["MAY_CHANGE", "resumed_namespace", "check_resumed_records"]

# the flags whose Flag says --resume may change them (harness.settings.flags: declared once)
MAY_CHANGE = tuple(f.name for f in FLAGS if f.resume)


def _spell(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return name if value else f"no {name}"
    if isinstance(value, list):
        return " ".join(f"{name}={v}" for v in value) or f"no {name}"
    return f"{name} {value}" if value is not None else f"no {name}"


def resumed_namespace(run_id: str, written: dict[str, Any], manifest: RunManifest
                      ) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The run's flags (its manifest's), with the ``MAY_CHANGE`` flags the new command line
    ``written`` (``flag_manifest.parse_flags``) applied, and the flags the run's own command
    line wrote; ``UsageError`` for any other flag that differs."""
    if manifest.explains:
        # an explain run's plan is its parent's cells and their rungs, not its options
        parent = manifest.explained_run
        raise UsageError(f"--resume {run_id}: an explain run of {parent}; continue it with "
                         f"`sweep explain {parent} --resume {run_id}`")
    ns, run_written = namespace_of(manifest, f"--resume {run_id}")   # its options, else its command line
    if getattr(ns, "url", None):
        # docs/live.md: the running server has cached the run's documents, so a point run
        # again would not be cold, and every point would be measured twice
        raise UsageError(f"--resume {run_id}: a --url run is not resumed (its documents are "
                         f"in the running server's prefix cache now); sweep {ns.url} again "
                         "as a new run")
    given = {k: v for k, v in written.items() if k != "--resume"}
    for name, value in given.items():
        if name in MAY_CHANGE:
            continue
        if name in ("--prefix-cache", "--no-prefix-cache"):
            was = ns.prefix_cache
            if was is None or was != value:
                shown = ("the preset's default" if was is None
                         else "--prefix-cache" if was else "--no-prefix-cache")
                raise UsageError(f"--resume {run_id}: {name} differs from the run's "
                                 f"{shown}; {_rule()}")
            continue
        was = getattr(ns, dest_of(name))
        if was != value:
            raise UsageError(f"--resume {run_id}: {_spell(name, value)} differs from the "
                             f"run's {_spell(name, was)}; {_rule()}")
    if ns.reports_dir is None and ns.out is None and "--reports-dir" not in given:
        # the run wrote to the default reports/: a resume line naming --out (as the
        # interrupt message spells it) must not move the report beside the results
        ns.reports_dir = "reports"
    for name in MAY_CHANGE:
        if name in given:
            setattr(ns, dest_of(name), given[name])
    if "--slots" in given:   # exclusive: the new one wins
        ns.gpus = None
    if "--gpus" in given:
        ns.slots = None
    ns.resume = run_id
    return ns, run_written


def _rule() -> str:
    return (f"a resumed run keeps its plan (only {', '.join(MAY_CHANGE)} may change); "
            "start a new run to measure something else")


def check_resumed_records(opts) -> list[str]:
    """Before any server: the results file of the run being resumed (``opts``: its
    ``SweepOptions``) holds only this run's records on this plan's configurations, a torn
    last line cut off (``record_check.check_for_resume``); returns what was repaired, one
    sentence each; ``UsageError`` naming the line otherwise."""
    from ..settings.configs import config_id
    from ..records.record_check import RecordFileError, check_for_resume
    from ..records.store import ARCHIVED_SUFFIX, RECORD_SUFFIX, ResultStore
    store = ResultStore(opts.outputs.out, opts.running.resume, create=False)
    gz = store.records_path.with_name(store.records_path.name.removesuffix(RECORD_SUFFIX)
                                      + ARCHIVED_SUFFIX)
    if not store.records_path.exists() and gz.exists():
        # appending to a fresh file would run every finished point again beside the gzip
        raise UsageError(f"--resume {opts.running.resume}: its records are compressed ({gz}); "
                         f"gunzip it first, then resume")
    try:
        return check_for_resume(store.records_path, opts.running.resume,
                                {config_id(c) for c in opts.serving.configs})
    except RecordFileError as e:
        raise UsageError(f"--resume {opts.running.resume}: {e}") from None
