"""Engine counters and their Prometheus exposition under vLLM's metric names.

Mirrors ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``):
``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
``vllm:spec_decode_num_accepted_tokens_total``, ``vllm:prefix_cache_queries_total``,
``vllm:prefix_cache_hits_total``, ``vllm:num_requests_running`` (labels ``model_name``,
``engine``), ``vllm:engine_sleep_state`` (one gauge per ``sleep_state``: ``awake``,
``weights_offloaded`` for level 1, ``discard_all`` for level 2, as ``record_sleep_state``). The counters are plain ints in the engine's hot path; ``prometheus_client``
is imported on the first scrape only, to keep boot fast.
"""
from __future__ import annotations


# (vLLM's metric name, its help text, the attribute of EngineMetrics that holds the value)
COUNTERS = (
    ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", "spec_decode_num_drafts"),
    ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
     "spec_decode_num_draft_tokens"),
    ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
     "spec_decode_num_accepted_tokens"),
    ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
     "prefix_cache_queries"),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
     "prefix_cache_hits"),
    ("vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens"),
    ("vllm:generation_tokens", "Number of generation tokens processed.", "generation_tokens"),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
     "num_preemptions"),
)
GAUGES = (
    ("vllm:num_requests_running", "Number of requests in model execution batches.",
     "num_requests_running"),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
     "num_requests_waiting"),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "kv_cache_usage"),
)
SLEEP_STATE_DOC = ("Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means "
                   "engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 "
                   "means sleep level 2.")


class EngineMetrics:
    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.spec_decode_num_drafts = 0
        self.spec_decode_num_draft_tokens = 0
        self.spec_decode_num_accepted_tokens = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.num_preemptions = 0
        self.num_requests_running = 0
        self.num_requests_waiting = 0
        self.kv_cache_usage = 0.0
        self.request_success = {"stop": 0, "length": 0, "abort": 0}
        self.sleep_level: int | None = None   # None: awake
        self._registry = None

    def _build(self):
        from prometheus_client import CollectorRegistry
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        metrics = self

        class _Collector:
            def collect(self):
                labels = ["model_name", "engine"]
                values = [metrics.model_name, "0"]
                for name, doc, attr in COUNTERS:
                    c = CounterMetricFamily(name, doc, labels=labels)
                    c.add_metric(values, getattr(metrics, attr))
                    yield c
                c = CounterMetricFamily("vllm:request_success", "Count of successfully "
                                        "processed requests.",
                                        labels=labels + ["finished_reason"])
                for reason, v in metrics.request_success.items():
                    c.add_metric(values + [reason], v)
                yield c
                for name, doc, attr in GAUGES:
                    g = GaugeMetricFamily(name, doc, labels=labels)
                    g.add_metric(values, getattr(metrics, attr))
                    yield g
                g = GaugeMetricFamily("vllm:engine_sleep_state", SLEEP_STATE_DOC,
                                      labels=labels + ["sleep_state"])
                for state, v in metrics.sleep_state().items():
                    g.add_metric(values + [state], v)
                yield g

        reg = CollectorRegistry(auto_describe=False)
        reg.register(_Collector())
        return reg

    def sleep_state(self) -> dict[str, int]:
        level = self.sleep_level
        return {"awake": int(level is None), "weights_offloaded": int(level == 1),
                "discard_all": int(level == 2)}

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        if self._registry is None:
            self._registry = self._build()
        return generate_latest(self._registry)
