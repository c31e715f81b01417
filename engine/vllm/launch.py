"""A ``ServingConfig`` becomes a ``vllm serve`` command line and its environment.

Pure data in, argv + env out: nothing here imports vLLM, so the exact command for every
preset prints on a laptop, in CI and on the GPU box alike. The flag spellings below were
checked against vLLM 0.27.1's own argument parser (``tests/vllm/test_vllm_launch.py`` feeds
every SPEC x CTX preset through ``make_arg_parser``), and against 0.26.0 where noted.

Entrypoint choice: ``python -m vllm.entrypoints.openai.api_server --model DIR``, not the
``vllm serve DIR`` console script. Both end in the same server; the module form needs no
console script on ``PATH`` (the GPU box runs vLLM from a ``PYTHONPATH`` bundle with no
``bin/``), pins the interpreter the harness chose, and was the form measured on the H200.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from engine.presets import LAB_ONLY_PATCHES, ServingConfig, normalise_patches
from . import API_SERVER_MODULE  # declared in the package: prefork reads it without this module
from .caches import cache_env
from .checkpoint import language_model_only_reason, mtp_head_problem
from .patches.releases import runner_env

# Re-exported so an adapter holding this module has the whole launcher surface.
from .effective import compare_effective, parse_effective_config, patch_status_from_log  # noqa: F401

#: Entry-point group and name under which the patch plugin is registered (pyproject).
PLUGIN_GROUP = "vllm.general_plugins"
PLUGIN_NAME = "residue_lab_patches"
PLUGIN_TARGET = "engine.vllm.patches:register"
#: Environment switch read by the plugin in every vLLM process: all | none | comma list.
PATCHES_ENV = "RESIDUE_LAB_PATCHES"


# ngram needs lookup bounds; these are the ones measured on the H200 (gpu/README.md).
NGRAM_LOOKUP = {"prompt_lookup_max": 4, "prompt_lookup_min": 2}


class LaunchError(ValueError):
    """The configuration cannot become a vLLM command (e.g. dflash without a drafter)."""


@dataclass(frozen=True)
class HybridOptions:
    """What a hybrid (GDN / Mamba + attention) model needs from vLLM 0.27.1 / 0.26.0.

    - ``mamba_cache_mode="align"``: without it a hybrid model's recurrent state is not
      cached at block boundaries, so prefix caching (and therefore Bug B) cannot happen.
    - ``gdn_prefill_backend="triton"``: the default picks FlashInfer, which the GPU bundle
      does not carry.
    - ``language_model_only``: a text-only checkpoint saved as the multimodal
      ``Qwen3_5ForConditionalGeneration`` (the only registry entry that serves it).
    """

    mamba_cache_mode: str | None = "align"
    gdn_prefill_backend: str | None = "triton"
    language_model_only: bool = False

    def argv(self, prefix_caching: bool) -> list[str]:
        out: list[str] = []
        if self.mamba_cache_mode and prefix_caching:
            out += ["--mamba-cache-mode", self.mamba_cache_mode]
        if self.gdn_prefill_backend:
            out += ["--gdn-prefill-backend", self.gdn_prefill_backend]
        if self.language_model_only:
            out.append("--language-model-only")
        return out


@dataclass(frozen=True)
class LaunchSpec:
    """The result of :func:`build_launch`: what to run, with what, and why."""

    argv: list[str]
    env: dict[str, str]
    notes: tuple[str, ...] = ()
    speculative_config: dict[str, Any] | None = None
    compilation_config: dict[str, Any] = field(default_factory=dict)

    def shell(self) -> str:
        """One pasteable line: ``ENV=... python -m ...`` (POSIX quoting)."""
        import shlex

        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + " ".join(shlex.quote(a) for a in self.argv)


def speculative_config_json(cfg: ServingConfig, *, draft_model: str | None = None,
                            extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``--speculative-config`` object vLLM needs for the preset's method.

    mtp: the target model's own MTP layers, no drafter path. dflash: a separate DFlash
    drafter checkpoint is required (``model``). ngram: prompt-lookup bounds.
    """
    base = cfg.speculative_config()
    if base is None:
        if extra:
            raise LaunchError("speculative extras given but the preset has no spec method")
        return None
    spec = dict(base)
    if cfg.method == "ngram":
        spec.update(NGRAM_LOOKUP)
    if draft_model:
        spec["model"] = draft_model
    if extra:
        spec.update(extra)
    if cfg.method == "dflash" and not spec.get("model"):
        raise LaunchError("SPEC=dflash2 needs the DFlash drafter checkpoint: pass "
                          "--draft-model DIR")
    return spec


def build_launch(cfg: ServingConfig, *, port: int, host: str = "127.0.0.1", model: str,
                 served_model_name: str | None = None, gpu: str | None = None,
                 hybrid: bool | HybridOptions | None = None, draft_model: str | None = None,
                 speculative_extra: Mapping[str, Any] | None = None,
                 extra_args: Sequence[str] = (), python: str | None = None,
                 base_env: Mapping[str, str] | None = None,
                 plugin_path: str | os.PathLike[str] | None = None,
                 runner: str = "auto",
                 cache_dir: str | os.PathLike[str] | None = None) -> LaunchSpec:
    """Everything :func:`build_command` returns, plus notes and the JSON objects passed.

    ``hybrid``: ``None`` follows ``cfg.geometry`` (``"hybrid"`` adds the hybrid flags with
    :class:`HybridOptions` defaults); ``True``/``False``/``HybridOptions`` decide explicitly.
    ``plugin_path``: a directory prepended to ``PYTHONPATH`` in the server's env; use
    :func:`write_plugin_dist_info` to make one when residue-lab is not pip-installed where
    vLLM runs (the GPU bundle), so vLLM still discovers the patch plugin.
    ``runner``: ``v1``/``v2`` force vLLM's model runner (``VLLM_USE_V2_MODEL_RUNNER``);
    ``auto`` leaves the release's default (the log then says which one ran).
    ``cache_dir``: one folder for the compile, Inductor and Triton caches
    (:func:`engine.vllm.caches.cache_env`), shared by every server given the same folder.
    """
    if not model:
        raise LaunchError("model path is required")
    if not (0 < int(port) < 65536):
        raise LaunchError(f"bad port {port}")
    notes: list[str] = list(cfg.notes)
    py = python or sys.executable
    argv: list[str] = [py, "-m", API_SERVER_MODULE, "--model", str(model),
                       "--host", host, "--port", str(int(port))]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    argv += _cache_flags(cfg, notes)
    spec = speculative_config_json(cfg, draft_model=draft_model, extra=speculative_extra)
    if cfg.method == "mtp" and (problem := mtp_head_problem(model)):
        raise LaunchError(f"SPEC=mtp: {problem}")
    compilation = {"cudagraph_mode": cfg.cudagraph_mode}
    argv += _engine_flags(cfg, spec, compilation)
    if hybrid is None:
        hybrid = getattr(cfg, "geometry", None) == "hybrid"
    if hybrid:
        opts = hybrid if isinstance(hybrid, HybridOptions) else HybridOptions()
        argv += opts.argv(cfg.prefix_caching)
        if cfg.prefix_caching and not opts.mamba_cache_mode:
            notes.append("WARNING: hybrid model with prefix caching but no "
                         "--mamba-cache-mode align: the recurrent state is not cached, "
                         "so no cache hit (and no Bug B) can happen")
    extra = [str(a) for a in extra_args]
    if "--language-model-only" not in argv and "--language-model-only" not in extra:
        reason = language_model_only_reason(model)
        if reason:
            argv.append("--language-model-only")
            notes.append(reason)
    argv += extra
    env = _server_env(cfg, base_env, runner=runner, gpu=gpu, plugin_path=plugin_path,
                      cache_dir=cache_dir)
    if env[PATCHES_ENV] == "none":
        notes.append("RESIDUE_LAB_PATCHES=none: the server runs vLLM unpatched (A/B run)")
    return LaunchSpec(argv=argv, env=env, notes=tuple(notes), speculative_config=spec,
                      compilation_config=compilation)


def _cache_flags(cfg: ServingConfig, notes: list[str]) -> list[str]:
    # Prefix caching: always explicit, since vLLM's default differs between versions
    # and model kinds (hybrid models used to default it off).
    argv = ["--enable-prefix-caching" if cfg.prefix_caching else "--no-enable-prefix-caching",
            "--block-size", str(cfg.block_size)]
    if cfg.prefix_match_unit is not None:
        if not cfg.prefix_caching:
            notes.append("--prefix-match-unit passed with prefix caching off: it only "
                         "shapes cache hits, so it has no effect")
        argv += ["--prefix-match-unit", str(cfg.prefix_match_unit)]
    return argv


def _engine_flags(cfg: ServingConfig, spec: dict | None, compilation: dict) -> list[str]:
    """Speculative and compilation config, lengths and memory, usage details, the seed."""
    argv: list[str] = []
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    argv += ["--compilation-config", json.dumps(compilation, separators=(",", ":"))]
    argv += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.kv_cache_memory_bytes is not None:
        argv += ["--kv-cache-memory-bytes", str(int(cfg.kv_cache_memory_bytes))]
    if getattr(cfg, "max_num_batched_tokens", None):
        # the chunked-prefill budget: a prompt ends in a final chunk of L mod B tokens
        argv += ["--max-num-batched-tokens", str(int(cfg.max_num_batched_tokens))]
    if getattr(cfg, "num_gpu_blocks", None):
        # a small KV pool (the evict history): eviction after a few prompts; a hybrid's
        # FULL decode graphs need a state block per sequence (config/compilation.py:
        # "max_num_seqs (1024) exceeds available Mamba cache blocks" at boot, H100,
        # 2026-12-06), so no more sequences than the pool has blocks
        blocks = int(cfg.num_gpu_blocks)
        argv += ["--num-gpu-blocks-override", str(blocks), "--max-num-seqs", str(blocks)]
    if getattr(cfg, "async_scheduling", None):
        # vllm/engine/arg_utils.py: SchedulerConfig.async_scheduling, a BooleanOptionalAction
        argv.append("--async-scheduling" if cfg.async_scheduling == "on"
                    else "--no-async-scheduling")
    # cached_tokens in usage proves which phases hit the cache (DESIGN §3).
    argv.append("--enable-prompt-tokens-details")
    argv += ["--seed", "0"]
    return argv


def _server_env(cfg: ServingConfig, base_env: Mapping[str, str] | None, *, runner: str,
                gpu: str | None, plugin_path, cache_dir) -> dict[str, str]:
    """The environment variables this configuration sets for its server."""
    env = dict(base_env or {})
    selected = normalise_patches(cfg.patches)
    if selected not in ("all", "none"):   # the lab's history fixes are no patch of vLLM's
        selected = ",".join(p for p in selected.split(",") if p not in LAB_ONLY_PATCHES) or "none"
    env[PATCHES_ENV] = selected
    try:
        env.update(runner_env(runner))
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    # Without this the engine dies importing flashinfer where the bundle lacks it
    # (measured on the H200, vLLM 0.26.0); the PyTorch sampler is exact.
    env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    if plugin_path is not None:
        parts = [str(plugin_path), _repo_root()]
        old = (base_env or {}).get("PYTHONPATH") or os.environ.get("PYTHONPATH")
        if old:
            parts.append(old)
        env["PYTHONPATH"] = os.pathsep.join(parts)
    if cache_dir is not None:
        env.update(cache_env(cache_dir))
    return env


def build_command(cfg: ServingConfig, *, port: int, host: str = "127.0.0.1", model: str,
                  served_model_name: str | None = None, gpu: str | None = None,
                  **options: Any) -> tuple[list[str], dict[str, str]]:
    """The server's argv and the environment variables to add for it.

    ``env`` holds only what this configuration sets (merge it over ``os.environ``).
    Keyword ``options`` are those of :func:`build_launch` (``hybrid``, ``draft_model``,
    ``speculative_extra``, ``extra_args``, ``python``, ``base_env``, ``plugin_path``).
    """
    launch = build_launch(cfg, port=port, host=host, model=model,
                          served_model_name=served_model_name, gpu=gpu, **options)
    return launch.argv, launch.env


def _repo_root() -> str:
    # engine/vllm/launch.py -> repository root (holds the `engine` package)
    return str(Path(__file__).resolve().parents[2])


def write_plugin_dist_info(directory: str | os.PathLike[str]) -> Path:
    """Write a minimal ``*.dist-info`` so vLLM discovers the plugin without pip.

    ``importlib.metadata`` finds entry points through ``*.dist-info/entry_points.txt`` on
    ``sys.path``; the GPU bundle runs vLLM from ``PYTHONPATH`` with residue-lab not
    installed. Put ``directory`` and the repository root on ``PYTHONPATH`` (``build_launch``
    does that with ``plugin_path=directory``). Its distribution name differs from the
    installed ``residue-lab``, so where both exist the plugin is listed twice and applies
    once (``register`` is idempotent per process).
    """
    root = Path(directory)
    info = root / "residue_lab_vllm_plugin-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: residue-lab-vllm-plugin\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(
        f"[{PLUGIN_GROUP}]\n{PLUGIN_NAME} = {PLUGIN_TARGET}\n")
    return root
