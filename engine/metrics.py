"""Engine metrics in Prometheus form, named as vLLM names them so existing dashboards work.

Names and meanings follow vLLM's `vllm/v1/metrics/loggers.py` (`vllm:num_requests_running`,
`vllm:kv_cache_usage_perc`, `vllm:time_to_first_token_seconds`, ...). Each replica keeps its own
registry; the router gathers every model's exposition text through handles and serves it at
`/metrics` (Ray's own exporter would prefix the names with `ray_`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engine.llm_engine import EngineStats

_LATENCY_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_TOKEN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


class EngineMetrics:
    """Counters, gauges and histograms of one engine replica.

    Args:
        model_name: value of the `model_name` label.
    """

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        r, labels = self.registry, ["model_name"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r).labels(model_name)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=r).labels(model_name)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(model_name)

        self.running = gauge("vllm:num_requests_running", "Requests in the running batch.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage (1 = 100%).")
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prefix-cache lookups, in blocks."
        )
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix-cache hits, in blocks.")
        self.preemptions = counter("vllm:num_preemptions", "Sequences preempted (recompute).")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prefilled prompt tokens.")
        self.generation_tokens = counter("vllm:generation_tokens", "Generated tokens.")
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token (TTFT), seconds.",
            _LATENCY_BUCKETS,
        )
        self.tpot = histogram(
            "vllm:time_per_output_token_seconds",
            "Time per output token after the first (TPOT), seconds.",
            _TOKEN_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency, seconds.",
            _LATENCY_BUCKETS,
        )
        self._last = EngineStats(0, 0, 0.0, 0, 1, 0, 0, 0)

    def observe_step(self, stats: EngineStats) -> None:
        """Update gauges and counters from the engine's figures after a step."""
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        self.kv_usage.set(stats.kv_usage)
        self.preemptions.inc(stats.num_preemptions - self._last.num_preemptions)
        self.prefix_queries.inc(stats.prefix_cache_queries - self._last.prefix_cache_queries)
        self.prefix_hits.inc(stats.prefix_cache_hits - self._last.prefix_cache_hits)
        self._last = stats

    def observe_request(
        self, ttft_s: float, e2e_s: float, num_prompt_tokens: int, num_output_tokens: int
    ) -> None:
        """Record a finished request's latencies (seconds) and token counts."""
        self.ttft.observe(ttft_s)
        self.e2e.observe(e2e_s)
        if num_output_tokens > 1:
            self.tpot.observe((e2e_s - ttft_s) / (num_output_tokens - 1))
        self.prompt_tokens.inc(num_prompt_tokens)
        self.generation_tokens.inc(num_output_tokens)

    def exposition(self) -> bytes:
        """The Prometheus text exposition of this replica's metrics."""
        return generate_latest(self.registry)
