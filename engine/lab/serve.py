"""Process lifetime: build the engine, serve HTTP with uvicorn, exit non-zero after the
engine core dies (as vLLM's API server shuts down on ``EngineDeadError``).

Mirrors ``vllm/entrypoints/openai/api_server.py`` (``run_server``, ``serve_http``) and
``vllm/entrypoints/launcher.py`` (the watchdog that terminates the server when the engine
is dead). The startup lines on stderr are shaped like vLLM's.
"""
from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from . import hold
from ._log import log
from .config import VERSION, LabConfig

DEAD_EXIT_DELAY_S = 0.5   # keep answering 500 / failing /health this long, then exit


def _import_uvicorn():
    """uvicorn's Config and Server without ``uvicorn/__init__``, which also imports its CLI
    (click) and the multiprocess supervisors the lab never uses: ~40 ms of every boot, and
    a sweep boots a server per data point. Falls back to the plain import."""
    import importlib.util
    import sys
    import types

    if "uvicorn" not in sys.modules:
        spec = importlib.util.find_spec("uvicorn")
        if spec is not None and spec.submodule_search_locations:
            pkg = types.ModuleType("uvicorn")
            pkg.__path__ = list(spec.submodule_search_locations)
            pkg.__spec__ = spec
            pkg.__file__ = spec.origin
            sys.modules["uvicorn"] = pkg
            try:
                from uvicorn.config import Config
                from uvicorn.server import Server
                pkg.Config, pkg.Server = Config, Server
                return Config, Server
            except Exception:
                for name in [n for n in sys.modules if n == "uvicorn" or n.startswith("uvicorn.")]:
                    del sys.modules[name]
    import uvicorn

    return uvicorn.Config, uvicorn.Server


def _log_config(cfg: LabConfig, compile_fingerprint: str) -> None:
    """The start-up lines vLLM logs, in its words and order: the engine's config line, the
    hybrid block promotion, the cache's hash unit, the KV pool, the graph mode, the patches
    (engine/vllm/effective.py reads them back from a real server's log)."""
    k = cfg.num_spec_tokens
    log("INFO", "core.py:93", f"Initializing a V1 LLM engine (v{VERSION}) with "
        f"config: model={cfg.model!r}, max_seq_len={cfg.max_model_len}, "
        f"enable_prefix_caching={cfg.enable_prefix_caching}, geometry={cfg.geometry}, "
        f"speculative_config={cfg.speculative_config}, patches={cfg.patches_label()}")
    if cfg.geometry == "hybrid":
        log("INFO", "config.py:427", f"Setting attention block size to {cfg.page_block} tokens "
            f"to ensure that attention page size is >= mamba page size.")
    if cfg.enable_prefix_caching:
        log("INFO", "kv_cache_manager.py:120", f"Prefix caching: hash block size "
            f"{cfg.block_size}, hit alignment {cfg.effective_hash_unit} tokens"
            + (f" (--prefix-match-unit {cfg.prefix_match_unit})" if cfg.prefix_match_unit else ""))
    if cfg.geometry == "hybrid":
        log("INFO", "config.py:310", f"mamba_cache_mode={cfg.mamba_cache_mode}"
            + (f": prefill chunks end at {cfg.mamba_block_size}-token blocks" if cfg.align_mode
               else "") + (", hits drop their last matched block (EAGLE-style drafter)"
                           if cfg.drop_eagle_block else ""))
    if cfg.sliding_window_block:
        log("INFO", "kv_cache_utils.py:1000", f"dflash drafter sliding-window group block "
            f"size: {cfg.sliding_window_block} tokens")
    # issue 48: what a broken cell's bytes depend on (the harness records it)
    log("INFO", "backends.py", f"compile fingerprint {compile_fingerprint} "
        f"(lab compile seed {cfg.compile_seed})")
    log("INFO", "kv_cache_utils.py:1087", f"GPU KV cache size: {cfg.kv_cache_tokens:,} tokens")
    log("INFO", "kv_cache_utils.py:1091", f"Maximum concurrency for {cfg.max_model_len:,} tokens "
        f"per request: {cfg.kv_cache_tokens / cfg.max_model_len:.2f}x")
    log("INFO", "gpu_model_runner.py:3480", f"cudagraph_mode={cfg.cudagraph_mode}"
        + (f", uniform decode query len {1 + k}" if k else ""))
    log("INFO", "lab", "patches: " + ", ".join(f"{n}={s}" for n, s in cfg.patch_status().items()))


def _exit_now(signum, frame) -> None:  # noqa: ARG001
    log("INFO", "server.py", "SIGTERM: exiting")
    sys.stderr.flush()
    os._exit(0)


def serve(cfg: LabConfig, t0: float) -> int:
    UvicornConfig, UvicornServer = _import_uvicorn()

    from .engine_core import AsyncEngine, EngineCore
    from .server import build_app
    from .tokenizer import LabTokenizer

    tokenizer = LabTokenizer(cfg.model)
    core = EngineCore(cfg, tokenizer)
    _log_config(cfg, core.runner.compile_fingerprint)

    state = {"dead": False}
    server = None

    def on_dead() -> None:
        state["dead"] = True
        loop = asyncio.get_running_loop()

        def stop() -> None:
            log("ERROR", "launcher.py:110", "Engine is dead: shutting down the API server.")
            if server is not None:
                server.should_exit = True
                server.force_exit = True  # do not wait for idle keep-alive connections
        loop.call_later(DEAD_EXIT_DELAY_S, stop)

    engine = AsyncEngine(core, on_dead)
    app = hold.around(build_app(cfg, engine, tokenizer))  # test only: see hold.py
    config = UvicornConfig(app, host=cfg.host, port=cfg.port, log_level="warning",
                            access_log=False, lifespan="off", loop="asyncio", http="h11",
                            timeout_graceful_shutdown=2, timeout_keep_alive=30)
    server = UvicornServer(config)

    async def main() -> None:
        engine.start()

        async def announce() -> None:
            while not server.started:
                await asyncio.sleep(0.002)
            log("INFO", "launcher.py:46", "Available routes are: /health, /v1/models, /version, "
                "/v1/chat/completions, /tokenize, /detokenize, /metrics, /reset_prefix_cache")
            log("INFO", "server.py", "Application startup complete.")
            log("INFO", "server.py", f"Uvicorn running on http://{cfg.host}:{cfg.port} "
                f"(Press CTRL+C to quit) [boot {time.monotonic() - t0:.3f}s]")
            # The lab holds nothing worth a graceful shutdown (no files, no GPU, no
            # children): SIGTERM exits at once instead of waiting out uvicorn's shutdown
            # tick and its keep-alive connections, ~150 ms per data point in a sweep.
            signal.signal(signal.SIGTERM, _exit_now)

        asyncio.get_running_loop().create_task(announce())
        await server.serve()

    asyncio.run(main())
    if state["dead"]:
        log("ERROR", "api_server.py:1950", "API server exiting: EngineDeadError")
        return 1
    if not server.started:
        return 1  # could not bind
    return 0
