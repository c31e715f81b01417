"""``sweep --url`` reading a vLLM server's self-report, built from vLLM's own classes.

``/server_info?config_format=json`` is vLLM's VllmConfig dumped by pydantic (dev mode);
``vllm:cache_config_info`` is CacheConfig.metrics_info() as a Prometheus gauge. Both are
made here with the pinned vLLM's classes (no GPU: the sub-configs only) and served through
an ``httpx.MockTransport``, so ``harness.run.live`` is checked against what vLLM really emits.
"""
from __future__ import annotations

import httpx
import pytest

from tests._vllm import require_vllm

require_vllm()

import pydantic  # noqa: E402
from prometheus_client import CollectorRegistry, Gauge, generate_latest  # noqa: E402
from vllm.config import CacheConfig, CompilationConfig  # noqa: E402
from vllm.config.compilation import CUDAGraphMode  # noqa: E402

from harness.judge import bugb  # noqa: E402
from harness.run.live import live_config, read_server  # noqa: E402

URL = "http://vllm.test:8000"


def dump(obj) -> dict:
    return pydantic.TypeAdapter(type(obj)).dump_python(obj, mode="json", fallback=str)


def metrics_text(cache: CacheConfig) -> str:
    info = cache.metrics_info()
    info["engine"] = "0"
    registry = CollectorRegistry()
    Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
          labelnames=list(info), registry=registry).labels(**info).set(1)
    return generate_latest(registry).decode()


def server(*, dev_mode: bool, mode=CUDAGraphMode.FULL_AND_PIECEWISE):
    cache = CacheConfig(block_size=16, enable_prefix_caching=True)
    vllm_config = {"cache_config": dump(cache),
                   "compilation_config": dump(CompilationConfig(cudagraph_mode=mode)),
                   "speculative_config": {"method": "mtp", "num_speculative_tokens": 3}}

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [
                {"id": "tiny-hybrid", "owned_by": "vllm", "root": "/models/tiny",
                 "max_model_len": 8192}]})
        if path == "/version":
            return httpx.Response(200, json={"version": "0.27.1"})
        if path == "/server_info" and dev_mode:
            return httpx.Response(200, json={"vllm_config": vllm_config, "vllm_env": {}})
        if path == "/metrics":
            return httpx.Response(200, text=metrics_text(cache))
        return httpx.Response(404, json={"detail": "Not Found"})

    return httpx.Client(base_url=URL, transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("mode", list(CUDAGraphMode))
def test_dev_mode_server_info_names_the_configuration(mode):
    with server(dev_mode=True, mode=mode) as http:
        cfg, facts = live_config(URL, read_server(URL, http))
    assert (cfg.engine, cfg.model, cfg.max_model_len) == ("vllm", "tiny-hybrid", 8192)
    assert (cfg.method, cfg.draft_tokens, cfg.cudagraph_mode) == ("mtp", 3, mode.name)
    assert (cfg.block_size, cfg.prefix_caching, cfg.prefix_match_unit) == (16, True, None)
    assert cfg.not_reported == ("patches",)     # residue-lab's plugin says so in its log only
    assert facts.engine_version == "0.27.1"
    assert "(not reported: patches)" in cfg.label()


def test_without_dev_mode_only_the_cache_config_is_known():
    with server(dev_mode=False) as http:
        cfg, _ = live_config(URL, read_server(URL, http))
    assert (cfg.engine, cfg.block_size, cfg.prefix_caching) == ("vllm", 16, True)
    assert set(cfg.not_reported) == {"method", "draft_tokens", "cudagraph_mode",
                                     "prefix_match_unit", "patches"}
    pred = bugb.predict(cfg.as_dict(), 128)
    assert pred.residues is None and "does not report" in pred.why
