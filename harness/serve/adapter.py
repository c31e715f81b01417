"""What every engine adapter is: the ``EngineAdapter`` seam (like httpx's transports) that
turns a ``ServingConfig`` into argv + env for a port and slot, names the local tokenizer used
for planning, and reads back the *effective* configuration after boot; and how a
pre-imported parent starts an adapter's servers (``PreforkSpec``). The adapters themselves:
``lab_adapter.py``, ``vllm_adapter.py``, ``cmd_adapter.py``; their registry: ``engines.py``.
"""
from __future__ import annotations

import asyncio
import copy
import os
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.presets import ServingConfig

from ..errors import UsageError
from .client import EngineClient
from .dummy_weights import dummy_weights_refusal
from ..names.isolation import restores as isolation_restores
from .slots import Slot

__all__ = ["EngineAdapter", "PreforkSpec", "after_module", "PORT_SENTINEL"]


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
    needs_model = False          # --model: none of its own (a --serve line may name one)
    takes_engine_args = True     # --engine-arg: extra arguments on its server command
    compile_caches = False       # --cache-dir: its servers compile into caches worth sharing
    # what `sweep --help` says of this engine under a flag (settings/flags.py builds the help text)
    help_notes: dict[str, str] = {}
    async_scheduling = False     # the engine has an asynchronous-scheduling switch
    serve = None   # --serve: the user's server line (harness/serve/serve_line.py)
    # the --patches an unwritten flag means on this engine (None: the flag's default)
    default_patches: str | None = None
    # where a reused server's prefix cache is emptied (--isolation reset): vLLM's route
    reset_path = "/reset_prefix_cache"

    def read_usage(self, res: Any, config: dict[str, Any]) -> Any:
        """A chat answer's usage as this engine means it (``config``: the server's
        effective configuration); the answer as it came unless the engine says otherwise."""
        return res

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

    @classmethod
    def config_refusal(cls, cfg: ServingConfig) -> str | None:
        """Why this engine cannot run ``cfg`` at all (None: it can), asked by a row of
        ``settings/flag_checks.RULES`` (``flag_facts.config_refusal``): a sweep stops in one
        line before any server; an ``explain`` rung asks it too and becomes a note."""
        return None

    def check(self, configs, slot: Slot) -> None:
        """Every configuration can be turned into a server command: raises
        ``UsageError`` while the sweep is built, never when a point boots. What the engine
        cannot run at all (``config_refusal``) or force onto a runner (``runners``) is
        ``RULES``' (the options' check), not this."""
        for cfg in configs:
            check_model_path(cfg.model)
            argv, _ = self.command(cfg, PORT_SENTINEL, slot)
            if (why := dummy_weights_refusal(argv)) is not None:
                raise UsageError(f"{cfg.label()}: {why}")

    def check_can_start(self) -> None:
        """Whether this machine can start the engine's servers at all: raises
        ``CannotRun`` (exit 3) before a sweep starts anything. Not part of ``check``:
        ``--dry-run`` plans a vLLM sweep where vLLM is not installed."""

    @classmethod
    def runner_refusal(cls, runner: str) -> str:
        """The line a ``--runner`` this engine lacks says (a ``RULES`` row asks it)."""
        return (f"--runner {runner}: --engine {cls.name} cannot be forced onto a model "
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

    def bind_compile(self, compiled: dict[str, Any] | None, gpu_models: list,
                     env: dict[str, str]) -> dict[str, Any] | None:
        """``boot_notes``' ``compile`` with its fingerprint bound to the GPU models and the
        server's run-time kernel switches (issue 48); unchanged where the engine's
        fingerprint already says all (the lab's)."""
        return compiled

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
        argv, env = self.command(cfg, PORT_SENTINEL, slot or Slot("cpu0"))
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        line = (envs + " " if envs else "") + shlex.join(str(a) for a in argv)
        return line.replace(str(PORT_SENTINEL), "{port}")


@dataclass(frozen=True)
class PreforkSpec:
    """What a pre-imported parent imports and how a plain argv becomes its child's."""

    preload: tuple[str, ...]
    optional: tuple[str, ...]
    entry: str                                   # "-m module"
    child_argv: Callable[[list], list | None]    # plain argv -> the child's argv
    child_env: Callable[[dict], dict] = dict     # plain env -> the child's env


def after_module(module: str) -> Callable[[list], list | None]:
    def child_argv(argv: list) -> list | None:
        a = [str(x) for x in argv]
        return a[3:] if len(a) >= 3 and a[1:3] == ["-m", module] else None
    return child_argv


# A port number no launcher rejects, replaced by "{port}" when a command is printed.
PORT_SENTINEL = 54321




def check_model_path(model: str | None) -> None:
    """A --model written as a local path (absolute, ./, ../, ~) must be a folder; anything
    else may be a Hugging Face id (owner/name) that the server downloads."""
    if not model or not model.startswith(("/", "./", "../", "~")):
        return
    path = Path(model).expanduser()
    if not path.is_dir():
        what = "is a file, not a model folder" if path.exists() else "does not exist"
        raise UsageError(f"--model: {model} {what} (a local model is a folder; a Hugging "
                         "Face id is written owner/name)")

