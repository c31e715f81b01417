"""The real serving stack: vLLM launch commands from the shared presets, the effective
configuration read back from a server's log, and residue-lab's patches as a vLLM plugin.

Module map (each file's docstring names the vLLM code it reads or mirrors):

- ``launch.py``        a ``ServingConfig`` -> ``python -m vllm.entrypoints.openai.api_server``
                       argv + env; the plugin's dist-info
- ``effective.py``     what a server booted with, read from its startup log (patterns built
                       from vLLM's own format strings)
- ``bootlog.py``       one server's boot split into stages (imports, engine core, weights,
                       compile, warm-up, graphs) from its log
- ``caches.py``        compile and Triton caches shared by a run's servers and kept between
                       runs; whether a server hit them
- ``kernel_digest.py`` the compile fingerprint: a digest over what picks the kernels (sources,
                       chosen configs, split graph; paths and timings out), bound to the GPU
- ``checkpoint.py``    what a local checkpoint needs from vLLM, read from its files
                       (``--language-model-only``, an MTP head)
- ``prefork.py``       vLLM on ``engine.prefork``: the parent's imports, a ``vllm serve``
                       argv as a forked child, the engine core's start method
- ``state_restore.py`` a worker extension (``/collective_rpc``) that returns one kind of
                       a worker's state at a time to its just-booted value (issue 24)
- ``poison.py``        the poison fill of a worker's state and KV pool, each region proven
                       (issue 32): ``PoisonWorker``, a ``StateRestore`` extension
- ``pool_fill.py``     the KV pool's storages each filled once with a byte tile, one
                       reduction each for the proof, a restore of named blocks (issue 51)
- ``pool_restore.py``  the worker's dirty set (the blocks its scheduler outputs gave) and
                       ``residue_lab_restore_pool`` / ``residue_lab_audit`` (issue 51)
- ``determinism.py``   the kernel choices fixed (vLLM's and PyTorch's own switches, caches
                       apart) so a broken cell answers the same on every server (issue 32)
- ``patches/``         residue-lab's fixes (and the opt-in scheduler trace) as a vLLM plugin

Nothing here imports vLLM at import time; only the patches touch it, when applied.

Harness surface::

    argv, env = build_command(cfg, port=8001, model="/models/x", gpu="0")
    effective = parse_effective_config(log_text)       # incl. effective["patch_status"]
    diffs = compare_effective(cfg.identity(), effective)
"""
from __future__ import annotations

#: The module ``vllm serve`` runs as the API server (``python -m`` it): the launcher's argv
#: and the prefork launcher's entry. Here, not in ``launch``, so ``prefork`` reads it
#: without loading the launch code.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# Names load on first use (PEP 562): the harness imports ``engine.vllm.prefork`` to word
# ``sweep --help`` and decide ``--launcher``, and a package ``__init__`` that imported
# ``effective``/``launch`` (and through them the caches, boot log and patch tables) cost
# every sweep process ~30 ms at start-up, lab sweeps included.
_WHERE = {"compare_effective": "effective", "parse_effective_config": "effective",
          "patch_status_from_log": "effective"}
_WHERE.update(dict.fromkeys(
    ("PATCHES_ENV", "PLUGIN_GROUP", "PLUGIN_NAME", "PLUGIN_TARGET", "HybridOptions",
     "LaunchError", "LaunchSpec", "build_command", "build_launch", "speculative_config_json",
     "write_plugin_dist_info"), "launch"))


def __getattr__(name: str):
    if name in _WHERE:
        from importlib import import_module
        value = getattr(import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value   # looked up once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def source_dir():
    """The installed vLLM's package folder, found without importing vLLM (importing it takes
    seconds and may touch the GPU); None where no vLLM is found. What a check reads from
    vLLM's source (sleep mode's routes, the kernel switch) it reads under here."""
    import importlib.util
    from pathlib import Path
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def patch_status() -> dict[str, str]:
    """Status of residue-lab's vLLM patches in this process (imports vLLM)."""
    from .patches import patch_status as _status

    return _status()


__all__ = [
    "API_SERVER_MODULE", "PATCHES_ENV", "PLUGIN_GROUP", "PLUGIN_NAME", "PLUGIN_TARGET", "HybridOptions",
    "LaunchError", "LaunchSpec", "build_command", "build_launch", "compare_effective",
    "parse_effective_config", "patch_status", "patch_status_from_log", "source_dir",
    "speculative_config_json", "write_plugin_dist_info",
]
