"""Sleep mode: what ``POST /sleep?level=N``, ``POST /wake_up`` and ``GET /is_sleeping`` do
to the engine's memory.

Mirrors, in vLLM 0.27.1 (the same in 0.26.0's shape):
- ``v1/engine/core.py`` ``EngineCore.sleep``: pause the scheduler first (level >= 1 also
  resets the prefix cache: ``pause_scheduler(clear_cache=True)``), then the executor sleeps;
  ``is_sleeping`` is "scheduler paused or executor asleep";
- ``v1/executor/abstract.py``: the executor's sleeping tags (``weights``, ``kv_cache``),
  its log lines "It took ... seconds to fall asleep." / "... to wake up tags ...";
- ``device_allocator/cumem.py`` ``CuMemAllocator.sleep``: level 1 backs up the ``weights``
  tag to CPU and discards everything else (the KV cache, which on a hybrid holds the mamba
  state too); ``wake_up`` maps *new, empty* memory for what was discarded. Without
  ``--enable-sleep-mode`` nothing is allocated through that allocator, so a sleep discards
  nothing: the pause and the prefix-cache reset happen, the KV memory keeps its contents.

The lab has no weights (the copy model is code), so level 1 and level 2 both discard only
the KV memory (``BlockPool.discard``). The bytes the allocator line reports are the KV
memory the configuration models (``bytes_per_token`` x pool tokens, the figure the boot
capacity check uses), not the numpy arrays that stand in for it.
"""
from __future__ import annotations

import time

from ._log import log
from .block_pool import BlockPool
from .config import LabConfig

__all__ = ["LEVELS", "MODES", "SleepState", "SleepError", "SleepFailed"]

GiB = 1 << 30
LEVELS = (0, 1, 2)
# vLLM's PauseMode: abort in-flight requests, wait for them to finish, or keep them paused
MODES = ("abort", "wait", "keep")
TAGS = ("weights", "kv_cache")


class SleepError(ValueError):
    """A sleep or wake-up request the engine refuses (becomes a 400)."""


class SleepFailed(RuntimeError):
    """The executor's sleep failed after the memory was released (becomes a 500): vLLM
    0.26.0's worker asserts the device's free memory grew, which another process on the same
    GPU can break; by then the scheduler is paused and cumem has discarded the memory."""


class SleepState:
    """The executor's side of sleep mode: which tags are asleep, and the memory it drops."""

    def __init__(self, cfg: LabConfig, pool: BlockPool) -> None:
        self.cfg = cfg
        self.pool = pool
        self.sleeping_tags: set[str] = set()
        self.level: int | None = None     # the level of the current sleep (None: awake)
        self.paused = False               # the scheduler's pause (level 0 and above)
        self.sleeps = 0                   # level >= 1 sleeps so far (cfg.fail_sleep_at)

    @property
    def is_sleeping(self) -> bool:
        return self.paused or bool(self.sleeping_tags)

    def pause(self, level: int) -> None:
        """The scheduler's pause, which every level starts with."""
        if level not in LEVELS:
            raise SleepError(f"sleep level must be one of {', '.join(map(str, LEVELS))}, "
                             f"got {level}")
        self.paused = True
        self.level = level

    def release(self, level: int) -> None:
        """The executor's sleep at level >= 1: drop the memory sleep mode allocated."""
        if level < 1:
            return
        if self.sleeping_tags:
            log("WARNING", "abstract.py:320", "Executor is already sleeping.")
            return
        t0 = time.perf_counter()
        total = self.cfg.num_gpu_blocks * self.cfg.block_size * self.cfg.bytes_per_token
        if self.cfg.enable_sleep_mode:
            self.pool.discard()
        else:
            total = 0   # nothing was allocated in the sleep-mode pool: nothing to drop
        if not self.cfg.quiet_allocator:
            log("INFO", "cumem.py:270", f"CuMemAllocator: sleep freed {total / GiB:.2f} GiB "
                f"memory in total, of which 0.00 GiB is backed up in CPU and the rest "
                f"{total / GiB:.2f} GiB is discarded directly.")
        self.sleeps += 1
        if self.sleeps == self.cfg.fail_sleep_at:   # paused, discarded, not marked asleep
            log("ERROR", "core.py:1548", "AssertionError: Memory usage increased after sleeping.")
            raise SleepFailed("Call to sleep method failed: Memory usage increased after sleeping.")
        # gpu_worker.py Worker.sleep, after its free-memory assertion: the device's free
        # memory before and after, so what was offloaded to CPU and what was discarded
        # together (the lab has no weights: the same figure as the allocator's)
        log("INFO", "gpu_worker.py:221", f"Sleep mode freed {total / GiB:.2f} GiB memory, "
            "0.00 GiB memory is still in use.")
        self.sleeping_tags = set(TAGS)
        log("INFO", "abstract.py:327",
            f"It took {time.perf_counter() - t0:.6f} seconds to fall asleep.")

    def wake_up(self, tags: list[str] | None) -> None:
        """Wake the given tags (None: all); the pause ends once nothing sleeps."""
        for tag in tags or ():
            if tag not in TAGS:
                raise SleepError(f"unknown tag {tag!r}; allowed: {', '.join(TAGS)}")
        if self.sleeping_tags:
            t0 = time.perf_counter()
            # The discarded memory is already empty (BlockPool.discard): mapping new memory
            # is all a wake-up does to it.
            woken = set(tags) if tags else set(self.sleeping_tags)
            log("INFO", "abstract.py:345", f"It took {time.perf_counter() - t0:.6f} seconds "
                f"to wake up tags {sorted(woken) if tags else sorted(self.sleeping_tags)}.")
            self.sleeping_tags -= woken
        if not self.sleeping_tags:
            self.paused = False
            self.level = None
