"""Kernel choices that do not depend on a boot's timing (issue 32).

The region hunt (``reports/h200/poison/``) filled every region of the KV pool and the
metadata builders' bookkeeping and a broken cell's answer did not move: on one server it
was always that server's first answer, and between servers of one machine it differed the
way a coin does (MTP k = 3 residue 4: two answers, swapped between the sleep-mode and plain
servers on the next machine). What is per process and chosen by a coin is not memory but a
benchmark: at its first call with a new shape key, a Triton kernel declared with
``@triton.autotune`` (the FLA kernels vLLM's GDN prefill runs,
``vllm/third_party/flash_linear_attention/ops/``) times every config and keeps the fastest,
and Inductor times candidate configs of its generated reductions. Two configs that tile a
reduction differently add in another order; at a correct cell the margins hide that, at a
corrupted one (a state the request never wrote, logits near a tie) the order picks the
token. Servers that boot side by side on a busy GPU time noisily, so which config wins is
per boot.

This module names the switches that make every choice fixed, all of them vLLM's or
PyTorch's own:

- ``VLLM_TRITON_FORCE_FIRST_CONFIG=1``: vLLM replaces ``triton.runtime.autotuner.Autotuner.run``
  with "the first config that compiles" (``vllm/triton_utils/force_first_config.py``,
  installed by ``vllm/env_override.py`` in every vLLM process);
- ``TORCHINDUCTOR_DETERMINISTIC=1``: Inductor skips on-device benchmarking that can change
  numerics (PyTorch's ``torch._inductor.config.deterministic``, in torch 2.11 as on the H200);
- ``VLLM_ENABLE_INDUCTOR_MAX_AUTOTUNE=0`` and ``VLLM_ENABLE_INDUCTOR_COORDINATE_DESCENT_TUNING=0``:
  vLLM turns both on for single-size compile ranges (``set_inductor_config`` in
  ``vllm/compilation/compiler_interface.py``), and both benchmark;
- Inductor's combo kernels off (``inductor_compile_config`` ``combo_kernels`` and
  ``benchmark_combo_kernel`` false, in ``--compilation-config``): vLLM turns both on unless
  the config names them (``vllm/config/compilation.py``), and the benchmark keeps a
  horizontal fusion only where it timed faster, so servers that each compiled their own
  cache answered an ngram cell two ways, with the switches above and with
  ``PYTHONHASHSEED`` fixed (H200, 2026-12-03, ``reports/h200/determinism/``); with both off
  every compile gave one answer;
- a compile cache of its own (``VLLM_CACHE_ROOT``, ``TORCHINDUCTOR_CACHE_DIR``,
  ``TRITON_CACHE_DIR`` under one folder): artifacts a non-deterministic boot tuned carry its
  choices, and a cache hit would load them.

Nothing here imports vLLM or torch.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Mapping

__all__ = ["KERNEL_ENV", "INDUCTOR_CONFIG", "CACHE_VARS", "deterministic_env", "fixed_compilation_argv", "is_deterministic", "vllm_fixes_kernels",
           "cache_root", "kernels_record"]

#: the switches, each vLLM's or PyTorch's own spelling
KERNEL_ENV: dict[str, str] = {
    "VLLM_TRITON_FORCE_FIRST_CONFIG": "1",
    "TORCHINDUCTOR_DETERMINISTIC": "1",
    "VLLM_ENABLE_INDUCTOR_MAX_AUTOTUNE": "0",
    "VLLM_ENABLE_INDUCTOR_COORDINATE_DESCENT_TUNING": "0",
}
#: what the mode merges into the server's compilation config's ``inductor_compile_config``
INDUCTOR_CONFIG: dict[str, bool] = {"combo_kernels": False, "benchmark_combo_kernel": False}
_CC = ("-cc", "--compilation-config")
#: the caches kept apart from a tuned boot's, as (variable, sub-folder)
CACHE_VARS = (("VLLM_CACHE_ROOT", "vllm"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
              ("TRITON_CACHE_DIR", "triton"))


def deterministic_env(cache_root: str | os.PathLike[str]) -> dict[str, str]:
    """The variables a vLLM server needs for fixed kernel choices, with its caches under
    ``cache_root`` (shared by every deterministic server of a run: their artifacts are the
    same, so sharing only saves compile time)."""
    env = dict(KERNEL_ENV)
    for var, sub in CACHE_VARS:
        env[var] = os.path.join(os.fspath(cache_root), sub)
    return env


def fixed_compilation_argv(argv: list[str]) -> list[str]:
    """``argv`` (a vLLM server's) with :data:`INDUCTOR_CONFIG` merged into the compilation
    config vLLM will use. vLLM's parser keeps the last ``-cc``/``--compilation-config``
    value, and dotted keys (``-cc.mode=3``) replace a JSON value: so the keys join the
    dotted ones where the line has them, else the last JSON value (an optimisation level
    such as ``3`` is ``{"mode": 3}`` to vLLM), else a value of their own."""
    out = list(argv)
    # vLLM gathers dotted keys per spelling as written (-cc and --compilation-config apart)
    # and appends each spelling's dict in first-seen order: the last one seen first wins
    dotted = [a.split(".", 1)[0] for a in out if a.split(".", 1)[0] in _CC and "." in a.split("=", 1)[0]]
    if dotted:
        flag = list(dict.fromkeys(dotted))[-1]
        return out + [f"{flag}.inductor_compile_config.{k}={json.dumps(v)}"
                      for k, v in INDUCTOR_CONFIG.items()]
    last = None   # (index, the flag when written as flag=value)
    for i, a in enumerate(out):
        if a in _CC and i + 1 < len(out):
            last = (i + 1, None)
        elif "=" in a and a.split("=", 1)[0] in _CC:
            last = (i, a.split("=", 1)[0])
    if last is None:
        return out + ["--compilation-config", json.dumps({"inductor_compile_config": INDUCTOR_CONFIG})]
    i, flag = last
    raw = out[i] if flag is None else out[i].split("=", 1)[1]
    try:
        cc = json.loads(raw)
    except json.JSONDecodeError:
        return out   # vLLM refuses the line itself: it says why
    cc = cc if isinstance(cc, dict) else {"mode": cc}
    cc["inductor_compile_config"] = {**(cc.get("inductor_compile_config") or {}), **INDUCTOR_CONFIG}
    value = json.dumps(cc, separators=(",", ":"))
    out[i] = value if flag is None else f"{flag}={value}"
    return out


def is_deterministic(env: Mapping[str, str]) -> bool:
    """Whether ``env`` has every kernel switch set as :data:`KERNEL_ENV` says."""
    return all(env.get(k) == v for k, v in KERNEL_ENV.items())


@functools.cache
def vllm_fixes_kernels() -> bool | None:
    """Whether the vLLM this process would start has ``VLLM_TRITON_FORCE_FIRST_CONFIG``
    (read from its source, not imported: importing vLLM takes seconds); None when no vLLM
    is found here. Without it the FLA kernels keep tuning by timing, so a fill cannot stand
    for a boot and restore stays the sleep cycle."""
    from engine.vllm import source_dir
    root = source_dir()
    if root is None:
        return None
    try:
        return ("VLLM_TRITON_FORCE_FIRST_CONFIG" in (root / "env_override.py").read_text(errors="replace")
                and (root / "triton_utils" / "force_first_config.py").is_file())
    except OSError:
        return False


def cache_root(cache_dir: str | os.PathLike[str] | None) -> str:
    """Where a run's deterministic servers keep their caches: beside ``--cache-dir``'s, or
    under ``~/.cache/residue-lab`` (never vLLM's default, which tuned boots fill)."""
    base = os.fspath(cache_dir) if cache_dir else os.path.join(os.path.expanduser("~"), ".cache", "residue-lab")
    return os.path.join(base, "deterministic-kernels")


def kernels_record(cache_dir: str | os.PathLike[str] | None, fixed: bool) -> dict:
    """What a record's ``poison.kernels`` says: fixed (the variables, the cache) or why not
    (``fixed``: :func:`vllm_fixes_kernels` for the vLLM the servers run)."""
    if not fixed:
        return {"fixed": False, "why": "this vLLM has no VLLM_TRITON_FORCE_FIRST_CONFIG"}
    return {"fixed": True, "env": dict(KERNEL_ENV), "inductor": dict(INDUCTOR_CONFIG),
            "cache": cache_root(cache_dir)}
