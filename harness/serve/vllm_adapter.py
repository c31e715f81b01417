"""``--engine vllm``: ``vllm serve`` argv from the shared presets (``engine.vllm``), with the
project's fix plugin, sleep mode for ``restore``, and ``--poison``'s worker extension and
fixed kernel choices (``engine/vllm/determinism.py``)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from engine.presets import ServingConfig
from engine.vllm import determinism as _det

from ..errors import CannotRun, UsageError
from .adapter import EngineAdapter, PreforkSpec
from .cmd_config import normalise_reported
from ..names.isolation import dev_mode as isolation_dev_mode, restores as isolation_restores
from .poison import WORKER_ARGS as POISON_ARGS
from .restore import SLEEP_MEANS, vllm_serves_sleep
from .slots import Slot

__all__ = ["VllmAdapter"]


class VllmAdapter(EngineAdapter):
    """``python -m vllm.entrypoints.openai.api_server`` from the shared presets, with the
    residue-lab patch plugin discoverable by every vLLM process."""

    name = "vllm"
    boot_timeout_s = 900.0
    needs_gpu = True
    restore_means = SLEEP_MEANS   # where the installed vLLM serves sleep mode (can_restore)
    poison_means = "/collective_rpc"   # with engine.vllm.poison.PoisonWorker (dev mode)
    runners = ("v1", "v2")       # VLLM_USE_V2_MODEL_RUNNER (engine.vllm.patches.releases)
    logprobs_default = 5    # V1 Sampler: logprobs are a side computation, greedy is argmax
    takes_draft_model = True
    async_scheduling = True      # --async-scheduling / --no-async-scheduling (arg_utils.py)
    needs_model = True           # no model of its own: --model or the --serve line's
    compile_caches = True        # torch.compile, Inductor and Triton (engine/vllm/caches)
    help_notes = {"--engine": "a vLLM install, on GPU; needs --model",
                  "--model": "required, a local model directory or HF id",
                  "--geometry": "hybrid adds --mamba-cache-mode align and the triton GDN "
                                "prefill backend",   # engine/vllm/launch.build_command
                  "--engine-arg": "--engine-arg=--language-model-only"}

    def __init__(self, *, draft_model: str | None = None, extra_args: tuple[str, ...] = (),
                 plugin_dir: Path | None = None, dev_mode: bool = False,
                 sleep_mode: bool = False, served_model_name: str | None = None,
                 cache_dir: Path | None = None) -> None:
        from engine.vllm import launch  # presets only: importing it does not import vLLM
        self._launch = launch
        self.served_model_name = served_model_name
        self.draft_model = draft_model
        self.extra_args = tuple(extra_args)
        # --isolation restore: the KV memory allocated where /sleep?level=1 discards it
        self.sleep_mode = sleep_mode
        # --cache-dir: every server of the run shares (and keeps) its compile caches
        self.cache_dir = Path(cache_dir).expanduser().resolve() if cache_dir else None
        # vLLM serves /reset_prefix_cache, /sleep, /wake_up and /is_sleeping only with its
        # development endpoints on: needed by --isolation reset / restore / auto, and only
        # there (the servers listen on 127.0.0.1).
        self.base_env = {"VLLM_SERVER_DEV_MODE": "1"} if dev_mode else {}
        self.plugin_path = None
        if plugin_dir is not None and not _plugin_installed():
            # residue-lab is not pip-installed where vLLM runs (e.g. a PYTHONPATH bundle):
            # a minimal dist-info lets vLLM find the plugin's entry point anyway.
            self.plugin_path = launch.write_plugin_dist_info(plugin_dir)

    @classmethod
    def build(cls, *, draft_model, extra_args, work_dir, isolation, served_model_name,
              cache_dir, **_):
        return cls(draft_model=draft_model, extra_args=extra_args,
                   plugin_dir=(work_dir / ".vllm-plugin") if work_dir else None,
                   dev_mode=isolation_dev_mode(isolation),
                   sleep_mode=isolation_restores(isolation),
                   served_model_name=served_model_name, cache_dir=cache_dir)

    def command(self, cfg, port, slot):
        # a configuration without a model was refused by settings/flag_checks.RULES
        try:
            argv, env = self._launch.build_command(
                cfg, port=int(port), model=cfg.model, gpu=slot.gpu,
                served_model_name=self.served_model_name,
                draft_model=self.draft_model,
                extra_args=_tp_args(slot) + self.extra_args + (
                    ("--enable-sleep-mode",) if self.sleep_mode and
                    "--enable-sleep-mode" not in self.extra_args else ()) + self.poison_argv(),
                plugin_path=self.plugin_path, runner=cfg.runner, base_env={
                    **self.base_env, **({"VLLM_SERVER_DEV_MODE": "1"} if self.poison else {})},
                **({"cache_dir": self.cache_dir} if self.cache_dir else {}))
        except self._launch.LaunchError as e:
            raise UsageError(f"--engine vllm: {e}") from None
        if cfg.history != "none":   # proven from the scheduler's own trace (the plugin's);
            # sibling pauses scheduling (/sleep?level=0&mode=keep: a development endpoint)
            env = {**env, "RESIDUE_LAB_SCHED_TRACE": "1", "VLLM_SERVER_DEV_MODE": "1"}
        if self.serve is not None:   # --serve: the user's line, the stack's environment
            argv = self.serve.argv(self, port, slot)
        if self.kernels_fixed:
            argv = _det.fixed_compilation_argv(argv)
            env = {**env, **_det.deterministic_env(_det.cache_root(self.cache_dir))}
        return argv, env

    @classmethod
    def can_restore(cls) -> bool:
        return vllm_serves_sleep() is not False

    def poison_argv(self) -> tuple[str, ...]:
        """--poison: the worker extension that serves the fill (serve_line.added_flags too)."""
        return POISON_ARGS if self.poison else ()

    @property
    def kernels_fixed(self) -> bool:
        """--poison on a vLLM with VLLM_TRITON_FORCE_FIRST_CONFIG: its servers get the
        switches of engine/vllm/determinism.py."""
        return self.poison and _det.vllm_fixes_kernels() is True

    @property
    def fill_restores(self) -> bool:
        """A fill stands for a boot once the kernels' choices are fixed too: the H200's
        round 3 (reports/h200/determinism/) gave, after reset + fill, each such server's
        fresh answer at every broken cell, where a reset alone did not."""
        return self.kernels_fixed

    def poison_kernels(self) -> dict[str, Any] | None:
        """--poison: what fixes the kernels' choices on its servers (the record keeps it)."""
        return _det.kernels_record(self.cache_dir, self.kernels_fixed) if self.poison else None

    def check_can_start(self) -> None:
        """vLLM importable by the Python the servers run (this one): without it an HF id
        failed at the probe server, a local folder as boot-fail cells (exit 1)."""
        import importlib.util
        try:
            found = importlib.util.find_spec("vllm") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise CannotRun(f"--engine vllm: vLLM is not installed in {sys.executable} "
                            "(the Python that starts its servers): pip install vllm, or run "
                            "sweep from the environment that has it")

    @classmethod
    def restore_refusal(cls) -> str:
        return ("--isolation restore: the installed vLLM has no sleep-mode endpoints "
                "(/sleep, /wake_up, /is_sleeping), so a server cannot be returned to its "
                "just-booted state; use --isolation fresh")

    def model_name(self, cfg: ServingConfig) -> str | None:
        # vLLM serves the --model argument as the model name unless told otherwise
        return self.served_model_name or cfg.model

    def refine(self, info, version, log_text):
        try:
            parsed = self._launch.parse_effective_config(log_text)
        except Exception as e:  # a log we cannot read is recorded, not fatal
            parsed = {"log_parse_error": str(e)}
        info["config"].update(normalise_reported(parsed))
        status = getattr(self._launch, "patch_status_from_log", None)
        if status:
            info["patch_status"] = status(log_text)

    @classmethod
    def prefork(cls):
        from engine.vllm import prefork as vp   # imports engine.prefork only, not vLLM
        return PreforkSpec(tuple(vp.VLLM_PRELOAD), tuple(vp.VLLM_PRELOAD_OPTIONAL),
                           vp.VLLM_ENTRY, vp.child_argv, vp.forked_env)

    boot_stages = ("python_start_and_imports_s", "api_server_to_engine_core_s",
                   "engine_core_to_weights_s", "compile_s", "graph_capture_s", "init_engine_s",
                   "weights_to_ready_s", "boot_s")

    def boot_notes(self, log_text, *, started_epoch, ready_epoch):
        """The boot split of engine/vllm/bootlog, the compile fingerprint (a digest over
        the compile caches the log names) and, with --cache-dir, whether this server hit
        the shared compile cache (engine/vllm/caches)."""
        from engine.vllm.bootlog import parse_boot_log
        from engine.vllm.caches import cache_use, compile_fingerprint
        split = parse_boot_log(log_text, started_at=started_epoch, health_at=ready_epoch)
        notes: dict[str, Any] = {"split": split.durations(),
                                 "compile_cache": split.compile_cache,
                                 "engine_core_spawn_forced": split.engine_core_spawn_forced,
                                 # issue 48: what a broken cell's bytes depend on, read
                                 # from the caches after readiness
                                 "compile": compile_fingerprint(log_text)}
        if self.cache_dir is not None:
            use = cache_use(log_text, root=self.cache_dir)
            notes["cache_dir"] = str(self.cache_dir)
            notes["cache_dir_shared"] = use.compile_dir_shared
        return notes


    def bind_compile(self, compiled, gpu_models, env):
        """The kernels digest plus the GPU models and the cuBLAS/FA switches in ``env``
        (engine/vllm/kernel_digest.bind): the same kernels on another GPU are another compile."""
        from engine.vllm.kernel_digest import bind
        return bind(compiled, gpu_models, env)


def _tp_args(slot: Slot) -> tuple[str, ...]:
    """``--tensor-parallel-size N`` for a slot of N GPUs (``--gpus 0+1``); nothing for one."""
    n = slot.tensor_parallel_size
    return ("--tensor-parallel-size", str(n)) if n > 1 else ()



def _plugin_installed() -> bool:
    from importlib.metadata import entry_points
    return any(ep.value.startswith("engine.vllm.patches")
               for ep in entry_points(group="vllm.general_plugins"))

