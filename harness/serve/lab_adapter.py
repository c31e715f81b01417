"""``--engine lab``: the CPU lab engine (``python -m engine.lab``), the embedded default."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from engine.presets import ServingConfig

from ..errors import UsageError
from ..names.history import history_row
from .adapter import EngineAdapter, PreforkSpec, after_module
from .cmd_config import normalise_reported
from ..names.isolation import restores as isolation_restores
from .restore import SLEEP_MEANS
from .slots import Slot

__all__ = ["LabAdapter", "LAB_MODEL_DIR"]

LAB_MODEL_DIR = Path(__file__).resolve().parents[2] / "engine" / "lab" / "model"
_COMPILE = re.compile(r"compile fingerprint ([0-9a-f]{12})")


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

    @classmethod
    def runner_refusal(cls, runner: str) -> str:
        # The lab's dispatch is V1's shape-only _is_uniform_decode; V2's prefill check is
        # what its prefill-discriminator patch adds, so --patches is the lab's switch.
        return (f"--runner {runner}: the lab engine has one model runner (V1's shape-only "
                "dispatch; --patches prefill-discriminator adds the prefill check V2 has); "
                "only --runner auto, v1/v2 are for --engine vllm")

    def boot_notes(self, log_text, *, started_epoch, ready_epoch):
        """The lab compile's fingerprint its log states (``--compile-seed``, issue 48)."""
        m = _COMPILE.search(log_text)
        return {"compile": {"fingerprint": m[1], "source": "the lab's log (--compile-seed)"}
                if m else {"fingerprint": None, "why": "the log states no compile fingerprint"}}

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
        if cfg.num_gpu_blocks:
            argv += ["--num-gpu-blocks-override", str(cfg.num_gpu_blocks)]
        if cfg.geometry:
            argv += ["--geometry", cfg.geometry]
        if history_row(cfg.history).align_mode and cfg.geometry != "dense":
            argv += ["--mamba-cache-mode", "align"]   # what vLLM runs a hybrid with
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
                           "-m engine.lab", after_module("engine.lab"))

