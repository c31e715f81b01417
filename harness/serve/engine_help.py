"""An engine's facts as ``sweep --help`` says them, asked of its adapter.

Every engine-dependent help text of ``settings/flags.py`` (a default per engine, which engines take
a flag, what a flag does on one engine) is built here from the adapters of
``engines.ADAPTERS``: the facts the sweep itself runs on (``boot_timeout_s``,
``logprobs_default``, ``needs_gpu``, ``runners``, ``prefork()``, ``takes_draft_model``,
``takes_engine_args``, ``compile_caches``) and each adapter's ``help_notes``, its words
under a flag. A fact changed in an adapter changes the help, and the usage errors that
name the engines, with it. The presets' words (``--spec``, ``--ctx``) are read off
``engine.presets``' tables the same way.
"""
from __future__ import annotations

from typing import Any, Callable

from .engines import ADAPTERS, EngineAdapter, engines_where

__all__ = ["engines_where", "per_engine", "for_engines", "notes", "engine_help", "runner_help",
           "can_fork", "spec_words", "ctx_words"]

Fact = Callable[[type[EngineAdapter]], Any]


def per_engine(fact: Fact, *, sep: str = " ", join: str = ", ") -> str:
    """``fact`` of every engine: "lab 60, vllm 900, cmd 300"; an engine whose fact is
    None or "" is left out."""
    return join.join(f"{n}{sep}{fact(cls)}" for n, cls in ADAPTERS.items()
                     if fact(cls) not in (None, ""))


def for_engines(fact: str | Fact) -> str:
    """"--engine lab or vllm": the engines a flag is for (``fact``: a predicate on the
    adapter, or the name of a true-or-false attribute of it)."""
    test = fact if callable(fact) else (lambda cls: getattr(cls, fact))
    return f"--engine {engines_where(test)}"


def notes(flag: str) -> str:
    """Each engine's words under ``flag`` (its ``help_notes``): "lab: X; vllm: Y"."""
    return per_engine(lambda cls: cls.help_notes.get(flag), sep=": ", join="; ")


def engine_help(default: str) -> str:
    """``--engine``: "lab (the shipped CPU lab engine, default) | vllm (...) | cmd (...)"."""
    def one(name: str, cls: type[EngineAdapter]) -> str:
        words = [w for w in (cls.help_notes.get("--engine"),
                             "default" if name == default else None) if w]
        return f"{name} ({', '.join(words)})" if words else name
    return " | ".join(one(n, cls) for n, cls in ADAPTERS.items())


def runner_help() -> str:
    """``--runner``: the runners each engine can be forced onto (its ``runners``)."""
    forced = per_engine(lambda c: " | ".join(c.runners) if c.runners else None, sep=": ")
    return (f"model runner(s) to force (matrix): auto (the release's default; the record's "
            f"effective configuration names the one that ran); {forced}; otherwise auto "
            f"only ({notes('--runner')})")


def can_fork(cls: type[EngineAdapter]) -> bool:
    """``--launcher prefork`` can fork this engine's servers from a pre-imported parent."""
    return cls.prefork() is not None


def spec_words() -> str:
    """``mtp (MTP head, k=3) | ...``: what each --spec value is (engine.presets)."""
    from engine.presets import SPEC_TABLE
    return " | ".join(f"{name} ({why.split(',')[0]}{f', k={k}' if method else ''})"
                      for name, (method, k, why) in SPEC_TABLE.items())


def ctx_words() -> str:
    """``fast (max_model_len 32768, block 16) | ...``: what each --ctx value sets."""
    from engine.presets import CTX_TABLE

    def one(name: str, t: dict) -> str:
        unit = f", hash unit {t['prefix_match_unit']}" if t.get("prefix_match_unit") else ""
        return f"{name} (max_model_len {t['max_model_len']}, block {t['block_size']}{unit})"
    return " | ".join(one(n, t) for n, t in CTX_TABLE.items())
