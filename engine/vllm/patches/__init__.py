"""residue-lab's fixes for vLLM, as a vLLM general plugin.

vLLM calls every ``vllm.general_plugins`` entry point in each process it starts (API
server, engine core, workers) before building an engine; ours is :func:`register`. It
reads ``RESIDUE_LAB_PATCHES`` (``all`` | ``none`` | comma list of patch names) and applies
each selected patch only if the code it replaces has the shape the patch was written for.
**Unset means none**: the entry point is loaded by every vLLM process of an environment
where residue-lab is installed, and a user who installs the tool beside their own serving
stack must not serve a patched vLLM without asking. The harness sets the variable
explicitly for every vLLM server it starts (``engine.vllm.launch``: ``--patches``, default
``all``); anyone else asks by name. It logs one line per process::

    residue-lab patches: {"prefill-discriminator": "applied", "sliding-window-guard": "applied"}

which ``engine.vllm.effective.parse_effective_config`` reads back into the run's record.
``python -m engine.vllm.patches --status`` prints the same map for the installed vLLM.

Status values: ``applied``; ``not-needed: <why>`` (the installed vLLM already carries the
fix, nothing was touched); ``refused: <why>`` (the code does not have the expected shape,
nothing was touched); ``off`` (not selected; ``off: not asked for ...`` when the variable
is unset). A patch with several targets is applied
atomically: if one target refuses, the others are rolled back.

Module map:

- ``prefill_discriminator.py`` the Bug B fix: a batch with a request still in its prompt is
  not a uniform decode batch, in both model runners (V1 ``gpu_model_runner.py``, V2
  ``gpu/model_runner.py``)
- ``sliding_window_guard.py`` the #18 fix: a sliding-window block larger than the cache-hit
  alignment is a clean miss (``SlidingWindowManager.find_longest_cache_hit``)
- ``sched_trace.py``  opt-in (``RESIDUE_LAB_SCHED_TRACE=1``): one log line per final prefill
  chunk ``Scheduler.schedule`` scheduled, in the lab's format; changes nothing
- ``releases.py``     which vLLM release runs which model runner, and whose dispatch checks
  for a prefill: the report's rule line, read in each release's wheel
- ``_shape.py``       the shape checks: does the code about to be wrapped look as expected
- ``_static.py``      the gates run on vLLM's source without importing it (``--check-source``)
- ``_sources.py``     vLLM's source files from a directory, a wheel or a release on PyPI

Importing this module does not import vLLM.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.presets import VLLM_PATCHES as PATCH_NAMES

from ._shape import AlreadyFixed, ShapeMismatch

ENV = "RESIDUE_LAB_PATCHES"
#: why every patch is off in a process nobody asked to patch (the variable unset)
NOT_ASKED = f"not asked for ({ENV} unset: the plugin acts only where it is set)"
#: vLLM releases whose code each patch's gates were run against: 0.27.1 installed (the
#: tests in tests/vllm run the real classes), the others by source from their wheels
#: (tests/vllm/test_vllm_release_table.py; the table is in releases.py and the docs).
CHECKED_AGAINST: dict[str, tuple[str, ...]] = {
    "prefill-discriminator": ("0.27.1", "0.26.0", "0.28.0", "0.33.0"),
    "sliding-window-guard": ("0.27.1", "0.26.0", "0.28.0", "0.33.0"),
}

logger = logging.getLogger("vllm.residue_lab.patches")

Check = Callable[[], dict[str, Any]]
Apply = Callable[[dict[str, Any]], Callable[[], None]]


@dataclass
class PatchState:
    name: str
    state: str = "pending"  # applied | not-needed | refused | off | pending
    reason: str = ""
    targets: dict[str, str] = field(default_factory=dict)
    undo: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def summary(self) -> str:
        return self.state if not self.reason else f"{self.state}: {self.reason}"


_lock = threading.Lock()
_states: dict[str, PatchState] = {}
_selection: str | None = None


def _targets(name: str) -> dict[str, tuple[Check, Apply]]:
    if name == "prefill-discriminator":
        from . import prefill_discriminator as mod
    elif name == "sliding-window-guard":
        from . import sliding_window_guard as mod
    else:  # pragma: no cover - PATCH_NAMES and this table are kept together
        raise KeyError(name)
    return mod.TARGETS


def parse_selection(value: str | None) -> set[str]:
    """``all`` | ``none`` | comma list -> the selected patch names (ValueError if unknown);
    unset (None) or empty selects none: the plugin patches only where it was asked to."""
    v = (value or "").strip()
    if v == "all":
        return set(PATCH_NAMES)
    if v in ("", "none"):
        return set()
    names = {p.strip() for p in v.split(",") if p.strip()}
    bad = sorted(names - set(PATCH_NAMES))
    if bad:
        raise ValueError(f"unknown patch name(s) {bad} in {ENV}={value!r}; "
                         f"known: all, none, {', '.join(PATCH_NAMES)}")
    return names


def _vllm_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:
        return None


def _apply_one(name: str, targets: dict[str, tuple[Check, Apply]]) -> PatchState:
    st = PatchState(name)
    found: dict[str, dict[str, Any]] = {}
    not_needed: dict[str, str] = {}
    for tname, (check, _) in targets.items():
        try:
            found[tname] = check()
        except AlreadyFixed as exc:
            not_needed[tname] = str(exc)
            st.targets[tname] = f"not-needed: {exc}"
        except (ShapeMismatch, ImportError, AttributeError, TypeError, ValueError,
                SyntaxError) as exc:
            st.state, st.reason = "refused", f"{tname}: {type(exc).__name__}: {exc}"
            st.targets[tname] = f"refused: {exc}"
            return st
    if not found:
        st.state = "not-needed"
        st.reason = "; ".join(f"{t}: {r}" for t, r in not_needed.items())
        return st
    try:
        for tname, info in found.items():
            st.undo.append(targets[tname][1](info))
            st.targets[tname] = f"applied (checked by {info.get('checked_by', '?')})"
    except Exception as exc:  # roll back what was applied: all or nothing
        for undo in reversed(st.undo):
            undo()
        st.undo.clear()
        st.state, st.reason = "refused", f"failed while applying: {type(exc).__name__}: {exc}"
        return st
    st.state = "applied"
    return st


def apply_patches(selection: str | None = None) -> dict[str, str]:
    """Apply the selected patches once per process; return ``{name: status}``.

    ``selection`` defaults to ``$RESIDUE_LAB_PATCHES``; unset, nothing is applied (every
    patch ``off: not asked for ...``). Calling it
    again is a no-op that returns the same status, unless :func:`restore_patches` ran.
    """
    global _selection
    with _lock:
        if _states:
            return _summaries()
        raw = selection if selection is not None else os.environ.get(ENV)
        try:
            chosen = parse_selection(raw)
        except ValueError as exc:
            for name in PATCH_NAMES:
                _states[name] = PatchState(name, "refused", str(exc))
            _selection = raw
            _log()
            return _summaries()
        _selection = raw if raw is not None else "unset"
        for name in PATCH_NAMES:
            if name not in chosen:
                _states[name] = PatchState(name, "off", "" if raw else NOT_ASKED)
                continue
            _states[name] = _apply_one(name, _targets(name))
        _log()
        return _summaries()


def _summaries() -> dict[str, str]:
    return {name: st.summary() for name, st in _states.items()}


def _log() -> None:
    states = _summaries()
    line = "residue-lab patches: " + json.dumps(states, sort_keys=True)
    if any(s.startswith("refused") for s in states.values()):
        logger.warning(line)
    else:
        logger.info(line)


def restore_patches() -> None:
    """Undo every applied patch in this process (tests, A/B in one process)."""
    global _selection
    with _lock:
        for st in reversed(list(_states.values())):
            for undo in reversed(st.undo):
                undo()
            st.undo.clear()
        _states.clear()
        _selection = None


def patch_status() -> dict[str, str]:
    """``{patch name: "applied" | "not-needed: why" | "refused: why" | "off"}``.

    The state of this process; if the plugin has not run here yet, runs it first (which
    imports vLLM). In the harness, prefer the map the server logs
    (``parse_effective_config(log)["patch_status"]``): that is what the server ran with.
    """
    return apply_patches()


def patch_manifest() -> dict[str, Any]:
    """Everything a results manifest should record about the patch set."""
    apply_patches()
    return {
        "vllm_version": _vllm_version(),
        "selection": _selection,
        "patches": {name: {"status": st.summary(), "targets": dict(st.targets),
                           "checked_against": list(CHECKED_AGAINST.get(name, ()))}
                    for name, st in _states.items()},
    }


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Never raises: a plugin that crashes
    takes the server with it, and a refused patch is reported, not fatal."""
    try:
        apply_patches()
    except Exception:  # pragma: no cover - defensive
        logger.exception("residue-lab patches: plugin failed; vLLM runs unpatched")
    try:   # the opt-in scheduler trace (RESIDUE_LAB_SCHED_TRACE=1): logs, changes nothing
        from .sched_trace import install
        if install() == "installed":
            logger.info("residue-lab scheduler trace: on")
    except Exception:  # pragma: no cover - defensive
        logger.exception("residue-lab scheduler trace: not installed")


__all__ = ["ENV", "NOT_ASKED", "PATCH_NAMES", "CHECKED_AGAINST", "apply_patches", "restore_patches",
           "patch_status", "patch_manifest", "parse_selection", "register"]
