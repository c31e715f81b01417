"""vLLM on the pre-imported launcher (:mod:`engine.prefork`): what to import in the parent,
how a ``vllm serve`` argv becomes a forked child, and the engine core's start method.

How vLLM 0.26.0 starts (read in the wheel):

- ``python -m vllm.entrypoints.openai.api_server`` runs the module's ``__main__`` block:
  ``cli_env_setup()`` sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` when it is unset
  (``entrypoints/serve/utils/api_utils.py``), then parses argv with ``make_arg_parser`` and
  runs ``uvloop.run(run_server(args))``. The child runs exactly that block
  (``runpy.run_module(..., run_name="__main__")``, what ``python -m`` does), so its argv
  parsing and start-up are the plain boot's.
- The engine core is a ``multiprocessing`` process from ``get_mp_context()``
  (``v1/engine/utils.py``, ``utils/system_utils.py``), whose method is
  ``VLLM_WORKER_MULTIPROC_METHOD``. Under the plain CLI that is ``spawn``: a fresh
  interpreter that imports torch and vLLM again (the ~17 s between the API server's and
  the engine core's first lines in the committed H200 logs). With ``fork`` the engine core
  is a fork of the API-server child and inherits the parent's imports too. vLLM itself
  switches back to spawn, with a warning in the log, if CUDA is initialised by then
  (``_maybe_force_spawn``); :func:`engine.vllm.bootlog.parse_boot_log` reports that.
  ``fork`` is vLLM's own default outside the CLI (``envs.py``), i.e. what ``LLM(...)`` does.
- The required list does not initialise CUDA (torch initialises it lazily; vLLM detects the
  platform through NVML). Of the optional list, the hybrid's model module and its GDN layer
  do, on the H200: they import vLLM's bundled FLA ops, whose module level asks torch for the
  device name (``third_party/flash_linear_attention/ops/utils.py``). The fork server's probe
  finds and skips them (:mod:`engine.prefork`); the child imports them. That same import in
  the child's API server (model-class resolution) initialises CUDA before the engine core
  starts, so vLLM forces ``spawn`` for it after all: measured on the H200, the fork saves
  the API server's ~17 s of imports, not the engine core's ~18 s (docs/boot.md).
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

from engine.prefork import ForkServer, start_child

from . import API_SERVER_MODULE

__all__ = ["ENGINE_CORE_METHODS", "VLLM_ENTRY", "VLLM_PRELOAD", "VLLM_PRELOAD_OPTIONAL",
           "child_argv", "forked_env", "start_vllm_server", "vllm_fork_server"]

VLLM_ENTRY = f"-m {API_SERVER_MODULE}"
#: Must import, or the fork server is unusable (the plain boot is used).
VLLM_PRELOAD = ("torch", "vllm", API_SERVER_MODULE)
#: What the API server and engine core import later on the way to serving a hybrid with
#: ngram; a failure here only means the child imports it itself.
VLLM_PRELOAD_OPTIONAL = (
    "transformers",
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.core",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.spec_decode.ngram_proposer",
    "vllm.model_executor.model_loader.default_loader",
    "vllm.model_executor.models.qwen3_5",
    "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
)
ENGINE_CORE_METHODS = ("fork", "spawn")


def child_argv(plain_argv: Sequence[str]) -> list[str] | None:
    """The arguments after ``python -m vllm.entrypoints.openai.api_server`` (what the
    child's argv is), or ``None`` when the plain argv is not that form."""
    argv = [str(a) for a in plain_argv]
    if len(argv) >= 3 and argv[1:3] == ["-m", API_SERVER_MODULE]:
        return argv[3:]
    return None


def forked_env(env: Mapping[str, str], engine_core: str = "fork") -> dict[str, str]:
    """The child's environment: ``engine_core`` picks the engine core's start method
    (``fork``: it inherits the imports; ``spawn``: the plain CLI's). An explicit
    ``VLLM_WORKER_MULTIPROC_METHOD`` in ``env`` wins."""
    if engine_core not in ENGINE_CORE_METHODS:
        raise ValueError(f"engine_core must be one of {ENGINE_CORE_METHODS}, got {engine_core!r}")
    out = dict(env)
    out.setdefault("VLLM_WORKER_MULTIPROC_METHOD", engine_core)
    return out


def vllm_fork_server(*, log_path: str | os.PathLike[str], env: Mapping[str, str],
                     python: str | None = None, cwd: str | os.PathLike[str] | None = None,
                     optional: Sequence[str] = VLLM_PRELOAD_OPTIONAL,
                     start_timeout: float = 300.0) -> ForkServer:
    """A started fork server with vLLM imported under ``env`` (give it the servers' env:
    some variables are read at import). Raises ``ForkServerUnavailable`` with the reason."""
    return ForkServer(VLLM_PRELOAD, optional, log_path=log_path, python=python, env=env,
                      cwd=cwd, start_timeout=start_timeout).start()


def start_vllm_server(plain_argv: Sequence[str], *, env: Mapping[str, str],
                      log_path: str | os.PathLike[str], server: ForkServer | None,
                      cwd: str | os.PathLike[str] | None = None, engine_core: str = "fork"):
    """One vLLM server: forked from ``server`` when it can be, else ``plain_argv`` as a
    plain process (``.how``, ``.fallback_reason`` say which and why)."""
    args = child_argv(plain_argv)
    reason = None if args is not None else (
        f"argv is not `python -m {API_SERVER_MODULE} ...`: cannot fork it")
    if server is None:
        return start_child(plain_argv, env=env, log_path=log_path, cwd=cwd)
    return start_child(plain_argv, env=env, log_path=log_path, cwd=cwd, server=server,
                       entry=VLLM_ENTRY, child_argv=args, fallback_reason=reason,
                       child_env=forked_env(env, engine_core))
