"""Engine configuration: flags resolved into one typed object, plus the model geometry's
page arithmetic and the boot-time KV capacity check.

Mirrors, in vLLM:
- ``vllm/config`` (``CacheConfig``, ``SpeculativeConfig``, ``CompilationConfig``): flags
  validated into one object whose *effective* values the server reports;
- ``vllm/model_executor/models/config.py`` (``HybridAttentionMambaModelConfig``): in a
  hybrid model the attention block is raised to the smallest multiple of the kernel chunk
  whose page holds one recurrent-state page (the "page block"); with prefix caching the
  state is only cached at page-block boundaries, so hits align to it;
- ``vllm/v1/core/kv_cache_utils.py`` (``unify_kv_cache_spec_page_size``,
  ``check_enough_kv_cache_memory``): other groups' blocks are promoted so every group has
  the same page size, and the server refuses to boot when one max-length request does not
  fit in the KV memory.

Nothing here imports numpy: the capacity check runs (and fails) before anything heavy.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GiB = 1 << 30
MODEL_DIR = Path(__file__).resolve().parent / "model"
PATCHES = ("prefill-discriminator", "sliding-window-guard", "align-publish-after-copy",
           "evict-group-key", "prefill-row-offsets", "mamba-chunk-grid")
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
# Modes that capture FULL graphs for uniform decode (spec-verify) batches.
FULL_DECODE_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
SPEC_METHODS = ("mtp", "dflash", "ngram")
GEOMETRIES = ("hybrid", "dense")
# vLLM's ``CacheConfig.mamba_cache_mode`` choices (``vllm/config/cache.py``, ``MambaCacheMode``).
MAMBA_CACHE_MODES = ("all", "align", "none")
# Methods whose drafter runs off the target's hidden states: vLLM's
# ``SpeculativeConfig.use_eagle()`` (eagle, eagle3, mtp, dflash); ngram is not one.
EAGLE_STYLE_METHODS = ("mtp", "dflash")
VERSION = "0.1.0+lab"


class ConfigError(ValueError):
    """A flag value the engine cannot run with (the CLI prints it and exits 2)."""


class CapacityError(ValueError):
    """max_model_len does not fit in the KV cache memory (vLLM's boot-time ValueError)."""


@dataclass(frozen=True)
class ModelGeometry:
    """The numbers in ``config.json`` that shape memory, not behaviour."""

    raw: dict[str, Any]

    @classmethod
    def load(cls, model_dir: Path) -> "ModelGeometry":
        path = Path(model_dir) / "config.json"
        try:
            return cls(json.loads(path.read_text()))
        except FileNotFoundError:
            raise ConfigError(f"--model {model_dir}: no config.json there") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"--model {model_dir}: config.json is not valid JSON ({e})") from None

    @property
    def max_position_embeddings(self) -> int:
        return int(self.raw.get("max_position_embeddings", 262144))

    @property
    def attn_bytes_per_token_per_layer(self) -> int:
        fa = self.raw["full_attention"]
        return 2 * fa["num_key_value_heads"] * fa["head_dim"] * fa["dtype_bytes"]  # K and V

    @property
    def num_attention_layers(self) -> int:
        return int(self.raw["full_attention"]["num_layers"])

    def state_page_bytes(self, k: int) -> int:
        """One recurrent layer's state page: ssm state + conv state, the conv window widened
        by the k speculative positions a verify step must be able to roll back."""
        la = self.raw["linear_attention"]
        b = la["state_dtype_bytes"]
        ssm = la["num_value_heads"] * la["key_head_dim"] * la["value_head_dim"] * b
        conv_dim = (2 * la["num_key_heads"] * la["key_head_dim"]
                    + la["num_value_heads"] * la["value_head_dim"])
        conv = conv_dim * (la["conv_kernel_size"] - 1 + k) * b
        return ssm + conv

    def page_block(self, k: int, block_size: int) -> int:
        """Hybrid: the attention block raised until its page holds a state page, in multiples
        of lcm(state chunk, block size). 2048 = 16x128 at k=3, 2176 = 17x128 at k=5 and 7."""
        chunk = math.lcm(int(self.raw["linear_attention"]["chunk_size"]), block_size)
        per_chunk = chunk * self.attn_bytes_per_token_per_layer
        return chunk * -(-self.state_page_bytes(k) // per_chunk)

    def dflash_checkpoint(self, k: int) -> dict[str, Any]:
        cps = sorted(self.raw["drafters"]["dflash"]["checkpoints"],
                     key=lambda c: c["max_draft_tokens"])
        for cp in cps:
            if k <= cp["max_draft_tokens"]:
                return cp
        raise ConfigError(f"--speculative-config: no dflash drafter checkpoint for "
                          f"num_speculative_tokens={k} (largest: {cps[-1]['max_draft_tokens']})")

    def drafter_layers(self, method: str | None, k: int) -> int:
        if not method:
            return 0
        if method == "dflash":
            return int(self.dflash_checkpoint(k)["num_layers"])
        return int(self.raw["drafters"][method]["num_layers"])

    def bytes_per_token(self, method: str | None, k: int) -> int:
        """KV bytes one token costs: target attention layers + drafter attention layers."""
        layers = self.num_attention_layers + self.drafter_layers(method, k)
        return layers * self.attn_bytes_per_token_per_layer

    def sliding_window_block(self, method: str | None, k: int, geometry: str,
                             block_size: int) -> int | None:
        """The dflash drafter's sliding-window group block after page-size unification.

        Every group must have the same page size. In the hybrid geometry that page is the
        page block's attention page, so the SW group (same per-token bytes) is promoted to
        the page block -- when its kernel can tile it (power of two). Otherwise it keeps
        --block-size and pads its page. Dense: the page is block_size tokens: no promotion.
        """
        if method != "dflash" or not self.dflash_checkpoint(k).get("sliding_window_layers"):
            return None
        if geometry != "hybrid":
            return block_size
        promoted = self.page_block(k, block_size)
        pow2_only = self.raw.get("sliding_window_kernel", {}).get("block_size_power_of_two", True)
        if pow2_only and promoted & (promoted - 1):
            return block_size
        return promoted


@dataclass
class LabConfig:
    """Everything the server runs with (what ``/version`` reports as effective_config)."""

    model: str = str(MODEL_DIR)
    served_model_name: str = "lab-copy"
    served_model_aliases: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    enable_prefix_caching: bool = False
    block_size: int = 16
    prefix_match_unit: int | None = None
    speculative_config: dict[str, Any] | None = None
    cudagraph_mode: str = "FULL_AND_PIECEWISE"
    max_model_len: int = 32768
    kv_cache_memory_bytes: int | None = None
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    enable_prompt_tokens_details: bool = False
    api_key: str | None = None
    seed: int = 0
    patches: tuple[str, ...] = PATCHES
    geometry: str = "hybrid"
    mamba_cache_mode: str = "all"
    # vLLM's --enable-sleep-mode: the KV memory is allocated where /sleep can discard it
    enable_sleep_mode: bool = False
    fail_sleep_at: int | None = None          # a fault: the Nth level >= 1 sleep fails (cli)
    # a fault (for tests): the allocator's 'CuMemAllocator: sleep freed' line is not logged
    # (vLLM's device_allocator logger set above INFO): only the worker's 'Sleep mode freed'
    quiet_allocator: bool = False
    # vLLM's --disable-log-stats: no stat logger, so /metrics has no vllm:* metric at all
    disable_log_stats: bool = False
    # vLLM's --tensor-parallel-size and the CUDA_VISIBLE_DEVICES the server was given: the
    # lab RECORDS them (effective config) and checks the group is large enough; it does not
    # shard anything: one CPU process computes every token either way
    tensor_parallel_size: int = 1
    visible_devices: str | None = None
    # vLLM's --num-gpu-blocks-override: the pool's size in blocks, after the capacity check
    num_gpu_blocks_override: int | None = None
    # vLLM's --async-scheduling / --no-async-scheduling: recorded only (None: not given)
    async_scheduling: bool | None = None
    # lab only (issue 48): which "compile" this server runs, a seeded choice of the captured
    # verify plan's staging layout (model_runner.compile_lanes); 0 is the layout of every
    # lab before it
    compile_seed: int = 0
    # derived (filled by finalize)
    bytes_per_token: int = 0
    num_gpu_blocks: int = 0
    page_block: int | None = None
    effective_hash_unit: int = 0
    sliding_window_block: int | None = None
    mamba_block_size: int | None = None      # align mode: prefill chunks end on these
    drop_eagle_block: bool = False           # hits drop their last matched unit
    # -cc max_cudagraph_capture_size (vLLM's CompilationConfig field): the largest uniform
    # decode batch, in tokens, that replays the captured plan; a larger one runs PIECEWISE
    max_cudagraph_capture_size: int = 512
    geometry_info: ModelGeometry | None = field(default=None, repr=False)

    @property
    def method(self) -> str | None:
        return (self.speculative_config or {}).get("method")

    @property
    def num_spec_tokens(self) -> int:
        return int((self.speculative_config or {}).get("num_speculative_tokens") or 0)

    @property
    def kv_cache_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def patch_on(self, name: str) -> bool:
        return name in self.patches

    def patch_status(self) -> dict[str, str]:
        return {p: ("applied" if p in self.patches else "off") for p in PATCHES}

    def patches_label(self) -> str:
        if set(self.patches) == set(PATCHES):
            return "all"
        return ",".join(sorted(self.patches)) or "none"

    def finalize(self) -> "LabConfig":
        """Validate and derive geometry; raises ConfigError or CapacityError."""
        geo = ModelGeometry.load(Path(self.model))
        self.geometry_info = geo
        if self.block_size <= 0:
            raise ConfigError("--block-size must be positive")
        if self.prefix_match_unit is not None:
            if self.prefix_match_unit <= 0 or self.prefix_match_unit % self.block_size:
                raise ConfigError(f"--prefix-match-unit must be a positive multiple of "
                                  f"--block-size ({self.block_size}), got {self.prefix_match_unit}")
        if self.max_model_len <= 0:
            raise ConfigError("--max-model-len must be positive")
        if self.max_model_len > geo.max_position_embeddings:
            raise ConfigError(f"--max-model-len {self.max_model_len} is larger than the model's "
                              f"max_position_embeddings ({geo.max_position_embeddings})")
        if self.max_num_batched_tokens <= 0 or self.max_num_seqs <= 0:
            raise ConfigError("--max-num-batched-tokens and --max-num-seqs must be positive")
        k = self.num_spec_tokens
        method = self.method
        if method == "dflash":
            geo.dflash_checkpoint(k)  # raises for k without a checkpoint
        self.bytes_per_token = geo.bytes_per_token(method, k)
        self.page_block = geo.page_block(k, self.block_size) if self.geometry == "hybrid" else None
        if self.prefix_match_unit:
            self.effective_hash_unit = self.prefix_match_unit
        elif self.page_block:
            self.effective_hash_unit = self.page_block
        else:
            self.effective_hash_unit = self.block_size
        self.sliding_window_block = geo.sliding_window_block(method, k, self.geometry,
                                                             self.block_size)
        self._derive_mamba_caching()
        self._size_pool()
        return self

    @property
    def align_mode(self) -> bool:
        """vLLM's ``need_mamba_block_aligned_split``: a hybrid in align mode."""
        return self.geometry == "hybrid" and self.mamba_cache_mode == "align"

    def _derive_mamba_caching(self) -> None:
        """Align mode as vLLM 0.26.0 runs it (``v1/core/sched/scheduler.py``
        ``_mamba_block_aligned_split``): the mamba block is the hybrid's promoted attention
        block (``platforms/interface.py`` sets them equal), here the page block, and
        EAGLE-style hits drop their last matched unit
        (``single_type_kv_cache_manager.py`` ``FullAttentionManager.find_longest_cache_hit``,
        ``drop_eagle_block``). The lab's default, ``all``, is the thread's stack: state
        snapshots at every hash unit, no chunk alignment and no drop (the thread's hits left
        a tail of exactly k + 1). Dense geometry has no mamba layers: nothing changes."""
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise ConfigError(f"--mamba-cache-mode must be one of {', '.join(MAMBA_CACHE_MODES)}, "
                              f"got {self.mamba_cache_mode!r}")
        self.mamba_block_size = self.page_block if self.align_mode else None
        self.drop_eagle_block = (self.align_mode and self.enable_prefix_caching
                                 and self.method in EAGLE_STYLE_METHODS)

    def _size_pool(self) -> None:
        self._size_pool_from_memory()
        if self.num_gpu_blocks_override:
            self.num_gpu_blocks = self.num_gpu_blocks_override

    def _size_pool_from_memory(self) -> None:
        needed = self.max_model_len * self.bytes_per_token
        if self.kv_cache_memory_bytes is None:
            # No explicit budget: a pool comfortably larger than one max-length request.
            tokens = max(2 * self.max_model_len, 131072)
            self.num_gpu_blocks = -(-tokens // self.block_size)
            return
        available = int(self.kv_cache_memory_bytes)
        self.num_gpu_blocks = available // self.bytes_per_token // self.block_size
        if self.num_gpu_blocks < 1:
            # not one block: no request of any length can be served, a value that cannot
            # work (refused before boot, issue 50), unlike a pool too small for
            # --max-model-len, which is the boot failure the thread measured
            raise ConfigError(f"--kv-cache-memory-bytes {available} holds no KV cache block "
                              f"({self.bytes_per_token * self.block_size} bytes each at "
                              f"--block-size {self.block_size}): no request can be served")
        if needed > available:
            est = (available // self.bytes_per_token) // self.block_size * self.block_size
            est_msg = (f"Based on the available memory, the estimated maximum model length is "
                       f"{est}." if est > 0 else "")
            raise CapacityError(
                f"To serve at least one request with the model's max seq len "
                f"({self.max_model_len}), {needed / GiB:.2f} GiB KV cache is needed, which is "
                f"larger than the available KV cache memory ({available / GiB:.2f} GiB). "
                f"{est_msg} Try increasing `gpu_memory_utilization` or decreasing "
                f"`max_model_len` when initializing the engine.")

    def effective(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("geometry_info", "api_key")}
        d["patches"] = self.patches_label()
        d["prefix_caching"] = self.enable_prefix_caching
        d["method"] = self.method
        d["draft_tokens"] = self.num_spec_tokens
        d["kv_cache_tokens"] = self.kv_cache_tokens
        d["api_key_required"] = bool(self.api_key)
        for flag in ("quiet_allocator", "disable_log_stats"):
            if not d[flag]:   # off, as every server before them: reported as it always was
                del d[flag]
        for flag in ("num_gpu_blocks_override", "async_scheduling"):
            if d[flag] is None:   # not given: reported as it always was
                del d[flag]
        if self.tensor_parallel_size == 1:   # a server of one slot reports as it always did
            del d["tensor_parallel_size"], d["visible_devices"]
        return d
