"""Engine adapters: the registry. ``ADAPTERS`` maps each engine name
(``names/engine.EngineName``) to its ``EngineAdapter`` class (``adapter.py`` says what an
adapter is), and everything else reads it: the ``--engine`` choices, ``make_adapter``, the
engines ``--help`` names.

- ``lab``: the CPU lab engine (``lab_adapter.py``), the embedded default;
- ``vllm``: ``vllm serve`` from the shared presets (``vllm_adapter.py``);
- ``cmd``: any OpenAI-compatible server from a user template (``cmd_adapter.py``);
- ``sglang``: ``python -m sglang.launch_server`` from the shared presets
  (``sglang_adapter.py``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..errors import UsageError
from ..names.engine import EngineName
from .adapter import EngineAdapter, PreforkSpec
from .cmd_adapter import CmdAdapter
from .cmd_config import normalise_reported
from .dummy_weights import dummy_weights_refusal
from .lab_adapter import LAB_MODEL_DIR, LabAdapter
from .poison import mode_for as poison_mode, why_not as poison_why_not
from .restore import vllm_serves_sleep
from .sglang_adapter import SglangAdapter
from .vllm_adapter import VllmAdapter

__all__ = ["EngineAdapter", "LabAdapter", "VllmAdapter", "CmdAdapter", "SglangAdapter", "ADAPTERS",
           "adapter_class", "make_adapter", "LAB_MODEL_DIR", "PreforkSpec", "normalise_reported",
           "vllm_serves_sleep", "auto_reuse_pass", "engines_where",
           "dummy_weights_refusal"]


# Adding an engine is its name in names/engine.ENGINES and one entry here (its adapter
# class: facts, ``build``, ``command``).
ADAPTERS: dict[str, type[EngineAdapter]] = {EngineName.LAB: LabAdapter,
                                             EngineName.VLLM: VllmAdapter,
                                             EngineName.CMD: CmdAdapter,
                                             EngineName.SGLANG: SglangAdapter}


def engines_where(fact: Callable[[type[EngineAdapter]], Any]) -> str:
    """The engines whose adapter has ``fact``, as a sentence (and ``--help``) says them:
    "lab or vllm"."""
    names = [n for n, cls in ADAPTERS.items() if fact(cls)]
    if len(names) < 2:
        return names[0] if names else "none"
    return ", ".join(names[:-1]) + " or " + names[-1]


def adapter_class(engine: str) -> type[EngineAdapter]:
    try:
        return ADAPTERS[engine]
    except KeyError:
        raise UsageError(f"--engine: {engine!r} is not valid; allowed: "
                         f"{', '.join(ADAPTERS)}") from None


def make_adapter(engine: str, server_cmd: str | None = None, *, draft_model: str | None = None,
                 extra_args: tuple[str, ...] = (), work_dir: Path | None = None,
                 isolation: str = "fresh", served_model_name: str | None = None,
                 served_config: dict | None = None, cache_dir: Path | None = None,
                 poison: str = "off") -> EngineAdapter:
    adapter = _make_adapter(engine, server_cmd, draft_model=draft_model, extra_args=extra_args,
                            work_dir=work_dir, isolation=isolation, served_config=served_config,
                            served_model_name=served_model_name, cache_dir=cache_dir)
    # --poison: on / auto where the engine fills (options.py refused "on" where it cannot)
    adapter.poison = poison_mode(poison, poison_why_not(type(adapter), tuple(extra_args)))
    return adapter


def _make_adapter(engine, server_cmd, *, draft_model, extra_args, work_dir, isolation,
                  served_model_name, served_config, cache_dir) -> EngineAdapter:
    cls = adapter_class(engine)  # an unknown engine is a usage error
    # what the engine does not take (--draft-model, --engine-arg, a restore) is refused by
    # settings/flag_checks.RULES before the options exist
    # sleep mode for restore points only: auto's restore pass gets it per point
    # (EngineAdapter.for_isolation), its fresh confirmations stay plain servers
    return cls.build(server_cmd=server_cmd, draft_model=draft_model, extra_args=extra_args,
                     work_dir=work_dir, isolation=isolation, served_config=served_config,
                     served_model_name=served_model_name, cache_dir=cache_dir)


def auto_reuse_pass(engine: str) -> str:
    """``--isolation auto``'s first pass on ``engine``: ``restore`` where a server can be
    returned to its just-booted state, else ``reset``."""
    return "restore" if adapter_class(engine).can_restore() else "reset"
