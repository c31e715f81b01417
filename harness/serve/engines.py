"""Engine adapters: how a configuration becomes a server, and what the server says it is.

The seam that keeps the harness testable without a GPU (like httpx's transports): an
adapter turns a ``ServingConfig`` into argv + env for a port and slot, names the local
tokenizer used for planning, and reads back the *effective* configuration after boot.

- ``lab``: the CPU lab engine (``python -m engine.lab``), the embedded default;
- ``vllm``: ``vllm serve`` argv from the shared presets (``engine.vllm``);
- ``cmd``: any OpenAI-compatible server from a user template with ``{port}``, ``{gpu}``,
  ``{model}`` placeholders.
"""
from __future__ import annotations

import asyncio
import copy
import json
import os
import shlex
import statistics
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.presets import ServingConfig
from engine.vllm import determinism as _det

from .client import EngineClient
from .cmd_config import cmd_label, normalise_reported, read_reported
from ..errors import CannotRun, UsageError
from .restore import SLEEP_MEANS, vllm_serves_sleep
from .poison import WORKER_ARGS as POISON_ARGS, mode_for as poison_mode, why_not as poison_why_not
from .dummy_weights import dummy_weights_refusal
from .isolation import dev_mode as isolation_dev_mode, restores as isolation_restores
from .slots import Slot

__all__ = ["EngineAdapter", "LabAdapter", "VllmAdapter", "CmdAdapter", "ADAPTERS", "EngineName",
           "adapter_class", "make_adapter", "LAB_MODEL_DIR", "PreforkSpec", "normalise_reported",
           "vllm_serves_sleep", "auto_reuse_pass", "engines_where",
           "dummy_weights_refusal"]

LAB_MODEL_DIR = Path(__file__).resolve().parents[2] / "engine" / "lab" / "model"

class EngineAdapter:
    name = "base"
    served_model_name: str | None = None
    # Engine facts the CLI and the backends read instead of testing engine names.
    boot_timeout_s = 300.0       # default --boot-timeout
    needs_gpu = False            # a server of this engine claims one GPU (Ray: num_gpus)
    runners: tuple[str, ...] = ()  # model runners --runner can force (none: one runner)
    # default --logprobs: top-N asked per answer token, only where asking is known not to
    # change the answer (docs/records.md, "logprobs"); an unknown server is not asked
    logprobs_default = 0
    # --isolation restore: the means (harness/serve/restore.py) by which a server of this engine
    # is returned to its just-booted state; None: it cannot be
    restore_means: str | None = None
    # start servers in sleep mode (--enable-sleep-mode): restore points only (for_isolation)
    sleep_mode = False
    # --poison: its servers serve the fill (harness/serve/poison.py); ``poison``: this run's are
    poison_means: str | None = None
    poison = False
    # a fill stands for a boot (restore refills, no sleep): the lab; vLLM where its kernel
    # choices are fixed too (VllmAdapter.fill_restores, reports/h200/determinism/)
    fill_restores = False
    takes_draft_model = False    # --draft-model: a drafter checkpoint for its servers
    takes_engine_args = True     # --engine-arg: extra arguments on its server command
    compile_caches = False       # --cache-dir: its servers compile into caches worth sharing
    # what `sweep --help` says of this engine under a flag (settings/flags.py builds the help text)
    help_notes: dict[str, str] = {}
    serve = None   # --serve: the user's server line (harness/serve/serve_line.py)

    def poison_kernels(self) -> dict[str, Any] | None:
        """--poison: what fixes kernel choices on its servers (None: nothing to fix)."""
        return None

    def for_isolation(self, isolation: str) -> "EngineAdapter":
        """Sleep mode for a ``restore`` point only (unless a fill restores): fresh points,
        auto's confirmations included, stay plain, the standard (docs/isolation.md)."""
        want = isolation_restores(isolation) and self.can_restore() and not (
            self.poison and self.fill_restores)
        if want == self.sleep_mode:
            return self
        other = copy.copy(self)
        other.sleep_mode = want
        return other

    @classmethod
    def can_restore(cls) -> bool:
        return cls.restore_means is not None

    @classmethod
    def restore_refusal(cls) -> str:
        """The one line --isolation restore is refused with on this engine."""
        return (f"--isolation restore: --engine {cls.name} has no way to return a server to "
                "its just-booted state (it needs vLLM's sleep mode: /sleep, /wake_up, "
                "/is_sleeping); use --isolation fresh")

    @classmethod
    def default_slots(cls) -> int:
        """Parallel servers when neither --slots nor --gpus is given: one per core for
        CPU engines, one for a GPU engine."""
        return 1 if cls.needs_gpu else max(1, os.cpu_count() or 1)

    @classmethod
    def build(cls, *, server_cmd, draft_model, extra_args, work_dir, isolation,
              served_model_name, served_config, cache_dir) -> "EngineAdapter":
        """This engine's adapter for a sweep's options (``make_adapter`` checked them)."""
        raise NotImplementedError

    def check(self, configs, slot: Slot) -> None:
        """Every configuration can be turned into a server command: raises
        ``UsageError`` while the sweep is built, never when a point boots."""
        for cfg in configs:
            if cfg.runner != "auto" and cfg.runner not in self.runners:
                raise UsageError(self.runner_refusal(cfg.runner))
            _check_model_path(cfg.model)
            argv, _ = self.command(cfg, _PORT_SENTINEL, slot)
            if (why := dummy_weights_refusal(argv)) is not None:
                raise UsageError(f"{cfg.label()}: {why}")

    def check_can_start(self) -> None:
        """Whether this machine can start the engine's servers at all: raises
        ``CannotRun`` (exit 3) before a sweep starts anything. Not part of ``check``:
        ``--dry-run`` plans a vLLM sweep where vLLM is not installed."""

    def runner_refusal(self, runner: str) -> str:
        return (f"--runner {runner}: --engine {self.name} cannot be forced onto a model "
                "runner; only --runner auto (--engine vllm has v1 and v2)")

    def model_name(self, cfg: ServingConfig) -> str | None:
        """The model name the server will serve, when it is known without asking it
        (None: read it from /v1/models after boot)."""
        return self.served_model_name

    def command(self, cfg: ServingConfig, port: int, slot: Slot) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def tokenizer_dir(self, cfg: ServingConfig) -> Path | None:
        if cfg.model and (Path(cfg.model) / "tokenizer.json").is_file():
            return Path(cfg.model)
        return None

    async def effective(self, client: EngineClient, cfg: ServingConfig,
                        log_text: str) -> dict[str, Any]:
        """{'config': effective dict, 'engine_version': str, 'patch_status': dict|None,
        'model': served model id, 'max_model_len': int|None}"""
        version, models = await asyncio.gather(client.version(), client.models())
        first = models[0] if models else {}
        eff = cfg.as_dict()
        if first.get("max_model_len"):
            eff["max_model_len"] = int(first["max_model_len"])
        info = {"config": eff, "engine_version": str(version.get("version", "unknown")),
                "patch_status": None, "model": first.get("id")}
        self.refine(info, version, log_text)
        return info

    def refine(self, info: dict[str, Any], version: dict[str, Any], log_text: str) -> None:
        """Engine-specific reading of what the server reported (in place)."""

    @classmethod
    def prefork(cls) -> "PreforkSpec | None":
        """How ``--launcher prefork`` forks this engine's servers (None: it cannot)."""
        return None

    def boot_notes(self, log_text: str, *, started_epoch: float | None,
                   ready_epoch: float | None) -> dict[str, Any]:
        """What the server's log says about its boot (split, caches); {} when nothing."""
        return {}

    # the stages of ``boot_notes``' "split" the manifest's boot summary takes medians of
    boot_stages: tuple[str, ...] = ()

    @staticmethod
    def first_request_extra_s(latencies: Sequence[float]) -> float | None:
        """How much longer a server's first request took than the median of its later
        ones (kernels compiled on first use); None with fewer than two latencies."""
        if len(latencies) < 2:
            return None
        return round(float(latencies[0]) - statistics.median(float(x) for x in latencies[1:]), 3)

    def shell_line(self, cfg: ServingConfig, slot: Slot | None = None) -> str:
        """The exact server command for ``cfg``, with ``{port}`` where the port goes."""
        argv, env = self.command(cfg, _PORT_SENTINEL, slot or Slot("cpu0"))
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        line = (envs + " " if envs else "") + shlex.join(str(a) for a in argv)
        return line.replace(str(_PORT_SENTINEL), "{port}")


@dataclass(frozen=True)
class PreforkSpec:
    """What a pre-imported parent imports and how a plain argv becomes its child's."""

    preload: tuple[str, ...]
    optional: tuple[str, ...]
    entry: str                                   # "-m module"
    child_argv: Callable[[list], list | None]    # plain argv -> the child's argv
    child_env: Callable[[dict], dict] = dict     # plain env -> the child's env


def _after_module(module: str) -> Callable[[list], list | None]:
    def child_argv(argv: list) -> list | None:
        a = [str(x) for x in argv]
        return a[3:] if len(a) >= 3 and a[1:3] == ["-m", module] else None
    return child_argv


# A port number no launcher rejects, replaced by "{port}" when a command is printed.
_PORT_SENTINEL = 54321


class LabAdapter(EngineAdapter):
    name = "lab"
    boot_timeout_s = 60.0
    logprobs_default = 5    # tests/lab/test_logprobs.py: byte-identical answers with/without
    default_served_name = "lab-copy"
    restore_means = SLEEP_MEANS   # the lab has vLLM's sleep mode (engine/lab/sleep.py)
    poison_means = "/collective_rpc"   # engine/lab/poison.py, always served
    fill_restores = True   # the lab's stale regions are exactly what its fill writes
    help_notes = {"--engine": "the shipped CPU lab engine", "--model": "the shipped copy model by default",
                  "--geometry": "the copy model's",
                  # _is_uniform_decode is V1's; the prefill check V2 has is a --patches fix
                  "--runner": "one runner, V1's shape-only dispatch, fixed by --patches",
                  "--engine-arg": "--engine-arg=--mamba-cache-mode=align"}

    def __init__(self, served_model_name: str | None = None, sleep_mode: bool = False,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.served_model_name = served_model_name or self.default_served_name
        self.sleep_mode = sleep_mode   # --enable-sleep-mode (restore runs)
        self.extra_args = tuple(extra_args)

    @classmethod
    def build(cls, *, served_model_name, extra_args, isolation, **_):
        return cls(served_model_name, sleep_mode=isolation_restores(isolation),
                   extra_args=extra_args)

    def runner_refusal(self, runner: str) -> str:
        # The lab's dispatch is V1's shape-only _is_uniform_decode; V2's prefill check is
        # what its prefill-discriminator patch adds, so --patches is the lab's switch.
        return (f"--runner {runner}: the lab engine has one model runner (V1's shape-only "
                "dispatch; --patches prefill-discriminator adds the prefill check V2 has); "
                "only --runner auto, v1/v2 are for --engine vllm")

    def model_dir(self, cfg: ServingConfig) -> Path:
        return Path(cfg.model) if cfg.model else LAB_MODEL_DIR

    def check(self, configs, slot: Slot) -> None:
        """The lab server's own validation of each configuration's command line, made
        now (a --block-size the match unit is not a multiple of boots 128 servers that all
        fail otherwise)."""
        super().check(configs, slot)
        from engine.lab.cli import check_args
        for cfg in configs:
            argv, _ = self.command(cfg, 8000, slot)
            problem = check_args(argv[3:])   # after `python -m engine.lab`
            if problem:
                raise UsageError(f"{cfg.label()}: the lab engine refuses this configuration: "
                                 f"{problem}")

    def tokenizer_dir(self, cfg: ServingConfig) -> Path | None:
        d = self.model_dir(cfg)
        return d if (d / "tokenizer.json").is_file() else None

    def command(self, cfg, port, slot):
        argv = [sys.executable, "-m", "engine.lab", "--host", "127.0.0.1", "--port", str(port),
                "--block-size", str(cfg.block_size), "--max-model-len", str(cfg.max_model_len),
                "-cc", json.dumps({"cudagraph_mode": cfg.cudagraph_mode}),
                "--enable-prompt-tokens-details", "--seed", "0",
                "--patches", cfg.patches, "--served-model-name", self.served_model_name]
        if cfg.model:
            argv += ["--model", cfg.model]
        argv.append("--enable-prefix-caching" if cfg.prefix_caching else "--no-enable-prefix-caching")
        if cfg.prefix_match_unit:
            argv += ["--prefix-match-unit", str(cfg.prefix_match_unit)]
        if cfg.speculative_config():
            argv += ["--speculative-config", json.dumps(cfg.speculative_config())]
        if cfg.kv_cache_memory_bytes:
            argv += ["--kv-cache-memory-bytes", str(cfg.kv_cache_memory_bytes)]
        if cfg.max_num_batched_tokens:
            argv += ["--max-num-batched-tokens", str(cfg.max_num_batched_tokens)]
        if cfg.geometry:
            argv += ["--geometry", cfg.geometry]
        if self.sleep_mode:
            argv.append("--enable-sleep-mode")
        if self.serve is not None:   # --serve: the user's lab line as written
            argv = self.serve.argv(self, port, slot)
        elif slot.tensor_parallel_size > 1:   # recorded by the lab, not sharded (docs/lab-engine.md)
            argv += ["--tensor-parallel-size", str(slot.tensor_parallel_size)]
        argv += list(self.extra_args)
        # One numpy/BLAS thread per server: slots are the parallelism.
        env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONUNBUFFERED": "1"}
        return argv, env

    def refine(self, info, version, log_text):
        info["config"].update(normalise_reported(version.get("effective_config") or {}))
        info["patch_status"] = version.get("patches")

    @classmethod
    def prefork(cls):
        return PreforkSpec(("engine.lab.cli", "engine.lab.serve", "engine.lab.server"), (),
                           "-m engine.lab", _after_module("engine.lab"))


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
        if not cfg.model:
            raise UsageError("--engine vllm needs --model (a local model directory or HF id)")
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
        """The boot split of engine/vllm/bootlog and, with --cache-dir, whether this
        server hit the shared compile cache (engine/vllm/caches)."""
        from engine.vllm.bootlog import parse_boot_log
        from engine.vllm.caches import cache_use
        split = parse_boot_log(log_text, started_at=started_epoch, health_at=ready_epoch)
        notes: dict[str, Any] = {"split": split.durations(),
                                 "compile_cache": split.compile_cache,
                                 "engine_core_spawn_forced": split.engine_core_spawn_forced}
        if self.cache_dir is not None:
            use = cache_use(log_text, root=self.cache_dir)
            notes["cache_dir"] = str(self.cache_dir)
            notes["cache_dir_shared"] = use.compile_dir_shared
        return notes


class CmdAdapter(EngineAdapter):
    """Any OpenAI-compatible server; the configuration is whatever the template starts, so
    the effective configuration is only what the server's endpoints report."""

    name = "cmd"
    takes_engine_args = False    # the whole command is the user's --server-cmd
    help_notes = {"--engine": "any OpenAI-compatible server --server-cmd starts"}

    def __init__(self, template: str | None, served_model_name: str | None = None,
                 served_config: dict | None = None):
        """``served_config``: the fields of ``--served-config`` as the options parsed them
        (``SweepOptions.served_fields``), never the JSON again."""
        self.served_model_name = served_model_name
        self.served_config = served_config
        if not template:
            raise UsageError("--engine cmd needs --server-cmd 'TEMPLATE' with a {port} placeholder")
        if "{port}" not in template:
            raise UsageError("--server-cmd: the template has no {port} placeholder")
        try:
            template.format(port=1, gpu="0", model="m", tp=1)
        except (KeyError, IndexError, ValueError) as e:
            raise UsageError(f"--server-cmd: bad placeholder {e}; allowed: {{port}}, {{gpu}}, "
                             "{model}, {tp}") from None
        try:
            shlex.split(template)
        except ValueError as e:
            raise UsageError(f"--server-cmd: cannot split the command line: {e}") from None
        self.template = template

    @classmethod
    def build(cls, *, server_cmd, served_model_name, served_config, **_):
        return cls(server_cmd, served_model_name, served_config)

    async def effective(self, client, cfg, log_text):
        """What the server runs, as ``harness.serve.cmd_config`` reads it: reported, declared,
        or "as the command ran" with the unknown fields named (never the presets)."""
        version, models = await asyncio.gather(client.version(), client.models())
        first = models[0] if models else {}
        config = read_reported(cfg, version, log_text, self.served_config)
        if first.get("max_model_len"):
            config["max_model_len"] = int(first["max_model_len"])
        status = version.get("patches") or config.pop("patch_status", None)
        return {"config": config, "engine_version": str(version.get("version", "unknown")),
                "patch_status": status, "model": first.get("id"),
                "config_label": cmd_label(cfg, config)}

    def command(self, cfg, port, slot):
        line = self.template.format(port=port, gpu=slot.gpu or "", model=cfg.model or "",
                                    tp=slot.tensor_parallel_size)
        env = {"CUDA_VISIBLE_DEVICES": slot.gpu} if slot.gpu is not None else {}
        return shlex.split(line), env


def _tp_args(slot: Slot) -> tuple[str, ...]:
    """``--tensor-parallel-size N`` for a slot of N GPUs (``--gpus 0+1``); nothing for one."""
    n = slot.tensor_parallel_size
    return ("--tensor-parallel-size", str(n)) if n > 1 else ()


def _check_model_path(model: str | None) -> None:
    """A --model written as a local path (absolute, ./, ../, ~) must be a folder; anything
    else may be a Hugging Face id (owner/name) that the server downloads."""
    if not model or not model.startswith(("/", "./", "../", "~")):
        return
    path = Path(model).expanduser()
    if not path.is_dir():
        what = "is a file, not a model folder" if path.exists() else "does not exist"
        raise UsageError(f"--model: {model} {what} (a local model is a folder; a Hugging "
                         "Face id is written owner/name)")


def _plugin_installed() -> bool:
    from importlib.metadata import entry_points
    return any(ep.value.startswith("engine.vllm.patches")
               for ep in entry_points(group="vllm.general_plugins"))


# Adding an engine is one entry here (its adapter class: facts, ``build``, ``command``).
ADAPTERS: dict[str, type[EngineAdapter]] = {"lab": LabAdapter, "vllm": VllmAdapter,
                                             "cmd": CmdAdapter}
# An engine as a value, one member per entry: EngineName.VLLM == "vllm" (a StrEnum, written
# as the word), so comparisons name the member or ask the adapter, never the string.
EngineName = StrEnum("EngineName", [(n.upper(), n) for n in ADAPTERS], module=__name__)


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
    if draft_model and not cls.takes_draft_model:
        raise UsageError("--draft-model is for --engine "
                         + engines_where(lambda c: c.takes_draft_model))
    if extra_args and not cls.takes_engine_args:
        raise UsageError("--engine-arg is for --engine "
                         f"{engines_where(lambda c: c.takes_engine_args)} "
                         f"(--engine {engine}: put the argument in --server-cmd)")
    if isolation_restores(isolation) and not cls.can_restore():
        raise UsageError(cls.restore_refusal())
    # sleep mode for restore points only: auto's restore pass gets it per point
    # (EngineAdapter.for_isolation), its fresh confirmations stay plain servers
    return cls.build(server_cmd=server_cmd, draft_model=draft_model, extra_args=extra_args,
                     work_dir=work_dir, isolation=isolation, served_config=served_config,
                     served_model_name=served_model_name, cache_dir=cache_dir)


def auto_reuse_pass(engine: str) -> str:
    """``--isolation auto``'s first pass on ``engine``: ``restore`` where a server can be
    returned to its just-booted state, else ``reset``."""
    return "restore" if adapter_class(engine).can_restore() else "reset"
