"""residue-lab CPU lab engine: an OpenAI-compatible server in which vLLM's Bug B, issue
#18 and the boot-capacity failure are real mechanisms (see docs/lab-engine.md).

Module map (each file's docstring names the vLLM code path it mirrors):

- ``cli.py``            flags -> ``LabConfig``; boot order (capacity check before listening)
- ``config.py``         effective configuration, page arithmetic, KV capacity check
- ``serve.py``          process lifetime: engine + uvicorn, exit status after engine death
- ``server.py``         OpenAI-compatible HTTP endpoints
- ``app_state.py``      what every handler shares: config, engine, tokenizer, request checks
- ``serving_chat.py``   ``/v1/chat/completions``: validation, JSON answer, SSE stream
- ``engine_core.py``    step loop, asyncio front, fatal-error path, sleep / wake up
- ``sleep.py``          what ``/sleep`` and ``/wake_up`` do to memory (``CuMemAllocator``)
- ``request.py``        one chat completion as the engine core tracks it
- ``scheduler.py``      token budget, chunked prefill, prefix-hit lookup, preemption
- ``sched_log.py``      the scheduler trace: every prefill chunk, the final one, aborts, evictions
- ``mamba_align.py``    align mode's state blocks: published when scheduled, written a step later
- ``mamba_chunks.py``   mode all's state blocks: written per kernel chunk, cached once full (#34587)
- ``evict_key.py``      which hash-map entry an evicted block takes with it (phantom hits)
- ``batch_layout.py``   where each prefill row of a batch reads its tokens (sibling rows)
- ``prompt_logprobs.py`` vLLM's ``prompt_logprobs`` from what the request's cache holds
- ``kv_cache_manager.py`` prefix-cache lookups per KV group, slot allocation, #18 assert
- ``block_pool.py``     physical blocks, LRU free queue, hash -> block map, KV arrays
- ``model_runner.py``   persistent batch, cudagraph dispatch (Bug B), verify, drafting
- ``poison.py``         the stale state a replayed verify plan reads, and its fill (#32)
- ``model.py``          the deterministic hybrid copy model
- ``instruction.py``    the copy model's reading of an instruction: which lines to copy
- ``spec_decode.py``    mtp / dflash / ngram drafters
- ``tokenizer.py``      tokenizer, chat template, incremental detokenizer
- ``metrics.py``        vLLM-named Prometheus metrics
- ``train_tokenizer.py`` offline: generates the training text and trains ``model/``
- ``bench.py``          boot-to-health and 4k-token latency measurement
- ``_log.py``           vLLM-shaped log lines
- ``hold.py``          test only: hold the first chat request (RESIDUE_LAB_TEST_HOLD_DIR)
"""
from .config import VERSION as __version__  # noqa: F401
