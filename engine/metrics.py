"""Engine metrics in Prometheus form, named as vLLM names them so existing dashboards work.

Names, types and meanings follow vLLM's `vllm/v1/metrics/loggers.py` (`vllm:num_requests_running`,
`vllm:kv_cache_usage_perc`, `vllm:inter_token_latency_seconds`, ...), every series labelled
`model_name` and `replica` (the Serve replica id; vLLM's `engine` label plays that part there), so
that a dashboard's `sum by (le)` / `sum by (model_name)` adds the replicas of a model up. Each
replica keeps its own registry and reports it to the router (`deployments.metrics.push`), which
serves every replica's at `/metrics` (Ray's own exporter would prefix the names with `ray_`).

Per generated token the engine thread does one histogram observation: the gap since the
request's previous token, in `vllm:inter_token_latency_seconds`. Its older name
`vllm:time_per_output_token_seconds` (the one vLLM dashboards before v0.10.2 query) is served as
a copy of the same histogram at scrape time, as `vllm:gpu_cache_usage_perc` is of
`vllm:kv_cache_usage_perc`. The per-request mean is `vllm:request_time_per_output_token_seconds`.

With LoRA adapters (`engine.lora`), `model_name` stays the base model (as in vLLM), and the
adapters appear in `vllm:lora_requests_info` (vLLM's info gauge: its value is the time of the
last change, its labels `max_lora` and the comma-separated `running_lora_adapters` and
`waiting_lora_adapters`; one series per replica at a time) and in
`ascend_router_lora_requests_total{lora_name}` (requests received per adapter); each replica's
registered adapters are `ascend_router_lora_adapter_loaded{lora_name} 1`.

With speculative decoding (`engine.spec_decode`), vLLM's counters `vllm:spec_decode_num_drafts`,
`vllm:spec_decode_num_draft_tokens`, `vllm:spec_decode_num_accepted_tokens` and
`vllm:spec_decode_num_accepted_tokens_per_pos{position}` (position 0..k-1, each series from
start-up) follow the engine's totals once per step; the acceptance rate is
`accepted_tokens / draft_tokens`, the mean acceptance length `1 + accepted_tokens / drafts`.

In graph mode, `ascend_router_decode_graphs_in_use` counts the decode graph sizes compiled so far
(they compile in the background after the replica reports ready, `engine.graph_capture`; steps
of the other sizes run eager): it rises to the number of `graph_batch_sizes`, one per switch.

`ascend_router_kv_cache_bytes_per_token{kv_cache_dtype}` is what one token's KV takes on a rank as
stored: with `engine.kv_cache_dtype` `int8` / `fp8_e4m3` its codes plus scales, about half the
bf16 figure (docs/kv-cache.md); the label is the model dtype's name (`bfloat16`) for `auto`.

The scheduler's admission limits are `ascend_router_engine_max_num_seqs` and
`ascend_router_engine_max_num_batched_tokens`: the configured values, or with `engine.slo` the
ones its latency controller sets now (`engine.slo_controller`); with `engine.slo` the p90s it
holds are `ascend_router_engine_tpot_p90_seconds` (decode-step wall time) and
`ascend_router_engine_ttft_p90_seconds` (queued -> first token), 0 until measured.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engine.llm_engine import EngineStats
from engine.metric_aliases import Alias
from engine.outputs import RequestOutput
from engine.request_stats import FinishedRequest, RequestTimes, finished_request
from engine.spec_decode.speculator import SpecDecodeStats

LATENCY_BUCKETS = (
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
"""Request intervals (TTFT, e2e, queue, prefill, decode, inference), seconds."""
TOKEN_GAP_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
)
"""Gaps between tokens and their per-request mean, seconds (vLLM's, plus 5 ms)."""
FINISH_REASONS = ("stop", "length", "abort", "error")
"""Values of `finished_reason` on `vllm:request_success_total` (each series exists from start)."""


def token_count_buckets(max_model_len: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to `max_model_len` tokens (vLLM's `build_1_2_5_buckets`)."""
    buckets: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return tuple(buckets)
            buckets.append(mantissa * scale)
        scale *= 10


class EngineMetrics:
    """Counters, gauges and histograms of one engine replica.

    Args:
        model_name: value of the `model_name` label.
        replica: value of the `replica` label (the Serve replica id).
        max_model_len: context length in tokens (the top bucket of the token-count histograms).
        num_speculative_tokens: the model's k when it speculates (its `vllm:spec_decode_*`
            counters are declared); 0: speculation off, no such series.
    """

    def __init__(
        self, model_name: str, replica: str, max_model_len: int, num_speculative_tokens: int = 0
    ) -> None:
        self.registry = r = CollectorRegistry()
        labels, values = ["model_name", "replica"], (model_name, replica)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=r).labels(*values)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(*values)

        running = gauge("vllm:num_requests_running", "Requests in the running batch.")
        waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
        kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage (1 = 100%).")
        r.register(Alias(kv_usage, "vllm:gpu_cache_usage_perc", "KV-cache usage (1 = 100%)."))
        self.running, self.waiting, self.kv_usage = (
            g.labels(*values) for g in (running, waiting, kv_usage)
        )
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix-cache queries: full prompt blocks looked up when a sequence is admitted.",
        )
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix-cache hits: looked-up blocks found in the cache."
        )
        self.preemptions = counter("vllm:num_preemptions", "Sequences preempted (recompute).")
        self.decode_graphs = gauge(
            "ascend_router_decode_graphs_in_use",
            "Decode graph sizes compiled and in use (graph mode); the others run eager.",
        ).labels(*values)
        self.limit_seqs, self.limit_tokens, self.tpot_p90, self.ttft_p90 = (
            gauge(name, doc).labels(*values)
            for name, doc in (
                ("ascend_router_engine_max_num_seqs", "Running sequences admitted at most now."),
                ("ascend_router_engine_max_num_batched_tokens", "Tokens per step at most now."),
                (
                    "ascend_router_engine_tpot_p90_seconds",
                    "engine.slo: p90 decode-step wall time over its window, seconds.",
                ),
                (
                    "ascend_router_engine_ttft_p90_seconds",
                    "engine.slo: p90 queued -> first token over its window, seconds.",
                ),
            )
        )
        self.kv_bytes = Gauge(
            "ascend_router_kv_cache_bytes_per_token",
            "KV-cache bytes one token takes on a rank, as stored (engine.kv_cache_dtype: an "
            "8-bit cache counts its codes and scales).",
            [*labels, "kv_cache_dtype"],
            registry=r,
        )
        self._values = values
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens of finished requests.")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Tokens generated by finished requests."
        )
        self._labels = values
        self.success = Counter(
            "vllm:request_success",
            "Finished requests, by finished_reason (stop, length, abort, error).",
            [*labels, "finished_reason"],
            registry=r,
        )
        for reason in FINISH_REASONS:
            self.success.labels(*values, reason)
        tokens = token_count_buckets(max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Prompt length of finished requests, tokens.", tokens
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Tokens generated by finished requests.", tokens
        )
        self.max_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Most tokens generated by one sample of a request (its n samples), tokens.",
            tokens,
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token (TTFT): arrival -> the step that gave it, seconds.",
            LATENCY_BUCKETS,
        )
        itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Time between two consecutive tokens of a request, seconds (one sample per gap).",
            labels,
            buckets=TOKEN_GAP_BUCKETS,
            registry=r,
        )
        r.register(
            Alias(
                itl,
                "vllm:time_per_output_token_seconds",
                "Time per output token after the first: every gap between two tokens, seconds "
                "(the same samples as vllm:inter_token_latency_seconds).",
            )
        )
        self.itl = itl.labels(*values)
        self.request_tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Per request: (last token - first token) / (tokens - 1), seconds.",
            TOKEN_GAP_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency: arrival -> finish, seconds.",
            LATENCY_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Time waiting: queued in the engine -> first scheduled, seconds.",
            LATENCY_BUCKETS,
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds",
            "Prefill: first scheduled -> first token (preemptions included), seconds.",
            LATENCY_BUCKETS,
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Decode: first token -> last token, seconds.",
            LATENCY_BUCKETS,
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds",
            "Running: first scheduled -> last token, seconds.",
            LATENCY_BUCKETS,
        )
        self.lora_info = Gauge(
            "vllm:lora_requests_info",
            "Running and waiting LoRA adapters (value: time of the last change, seconds).",
            [*labels, "max_lora", "running_lora_adapters", "waiting_lora_adapters"],
            registry=r,
        )
        self.lora_requests = Counter(
            "ascend_router_lora_requests",
            "Requests received per LoRA adapter.",
            [*labels, "lora_name"],
            registry=r,
        )
        self.lora_loaded = Gauge(
            "ascend_router_lora_adapter_loaded",
            "1 for each LoRA adapter registered on this replica (start-up or runtime).",
            [*labels, "lora_name"],
            registry=r,
        )
        self._lora_now: tuple[tuple[str, ...], ...] | None = None
        self._last = EngineStats(0, 0, 0.0, 0, 1, 0, 0, 0)
        self.spec: SpecDecodeMetrics | None = None
        if num_speculative_tokens:
            self.spec = SpecDecodeMetrics(r, labels, values, num_speculative_tokens)

    def observe_step(self, stats: EngineStats) -> None:
        """Update gauges and counters from the engine's figures after a step."""
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        self.kv_usage.set(stats.kv_usage)
        self.decode_graphs.set(stats.decode_graphs_in_use)
        if stats.kv_bytes_per_token:
            kv_bytes = self.kv_bytes.labels(*self._values, stats.kv_cache_dtype)
            kv_bytes.set(stats.kv_bytes_per_token)
        if stats.batch_limits is not None:
            self.limit_seqs.set(stats.batch_limits.max_num_seqs)
            self.limit_tokens.set(stats.batch_limits.max_num_batched_tokens)
        if stats.slo is not None:
            self.tpot_p90.set(stats.slo.tpot_p90_s or 0.0)
            self.ttft_p90.set(stats.slo.ttft_p90_s or 0.0)
        self.preemptions.inc(stats.num_preemptions - self._last.num_preemptions)
        self.prefix_queries.inc(stats.prefix_cache_queries - self._last.prefix_cache_queries)
        self.prefix_hits.inc(stats.prefix_cache_hits - self._last.prefix_cache_hits)
        if self.spec is not None and stats.spec is not None:
            self.spec.observe(stats.spec)
        self._last = stats
        lora = stats.lora
        if lora is not None:
            info = (str(lora.max_loras), ",".join(lora.running), ",".join(lora.waiting))
            if (info, lora.registered) != self._lora_now:
                self.lora_info.clear()
                self.lora_info.labels(*self._labels, *info).set_to_current_time()
                self.lora_loaded.clear()
                for name in lora.registered:
                    self.lora_loaded.labels(*self._labels, name).set(1)
                self._lora_now = (info, lora.registered)

    def count_lora_request(self, lora_name: str) -> None:
        """One request received for LoRA adapter `lora_name`."""
        self.lora_requests.labels(*self._labels, lora_name).inc()

    def observe_output(self, times: RequestTimes, out: RequestOutput, now: float) -> None:
        """Record one output of the step that ended at `now` (monotonic seconds): its token's
        TTFT or gap since the previous token, and the request's figures when it finished.
        Called on the engine thread for every output, so it stays at one observation per
        token."""
        if out.new_token_ids:
            gap = times.record_tokens(out.scheduled_at, now)
            if gap is None:
                self.ttft.observe(now - times.arrival)
            else:
                self.itl.observe(gap)
        if out.finished:
            self._observe_finished(finished_request(times, out, now))

    def _observe_finished(self, done: FinishedRequest) -> None:
        self.success.labels(*self._labels, done.finish_reason).inc()
        self.prompt_tokens.inc(done.num_prompt_tokens)
        self.generation_tokens.inc(done.num_generation_tokens)
        self.request_prompt_tokens.observe(done.num_prompt_tokens)
        self.request_generation_tokens.observe(done.num_generation_tokens)
        self.e2e.observe(done.e2e_s)
        if done.group_max_generation_tokens is not None:
            self.max_generation_tokens.observe(done.group_max_generation_tokens)
        phases = done.phases
        if phases is None:
            return
        self.queue_time.observe(phases.queue_s)
        self.prefill_time.observe(phases.prefill_s)
        self.decode_time.observe(phases.decode_s)
        self.inference_time.observe(phases.inference_s)
        if phases.mean_time_per_output_token_s is not None:
            self.request_tpot.observe(phases.mean_time_per_output_token_s)

    def exposition(self) -> bytes:
        """The Prometheus text exposition of this replica's metrics."""
        return generate_latest(self.registry)


class SpecDecodeMetrics:
    """vLLM's speculative decoding counters (`vllm/v1/spec_decode/metrics.py`), following the
    engine's totals (`SpecDecodeStats`).

    Args:
        registry: where the counters are registered.
        labels: label names (`model_name`, `replica`).
        values: their values.
        k: draft tokens per step (positions 0..k-1 of the per-position counter).
    """

    def __init__(
        self, registry: CollectorRegistry, labels: list[str], values: tuple[str, ...], k: int
    ) -> None:
        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=registry).labels(*values)

        self.drafts = counter("vllm:spec_decode_num_drafts", "Speculative drafts verified.")
        self.draft_tokens = counter(
            "vllm:spec_decode_num_draft_tokens", "Speculative draft tokens verified."
        )
        self.accepted_tokens = counter(
            "vllm:spec_decode_num_accepted_tokens", "Speculative draft tokens accepted."
        )
        per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Speculative draft tokens accepted, per draft position (0 = the first).",
            [*labels, "position"],
            registry=registry,
        )
        self.per_pos = [per_pos.labels(*values, str(pos)) for pos in range(k)]
        self._last = SpecDecodeStats(0, 0, 0, (0,) * k)

    def observe(self, stats: SpecDecodeStats) -> None:
        """Add what the engine counted since the previous call."""
        last = self._last
        self.drafts.inc(stats.num_drafts - last.num_drafts)
        self.draft_tokens.inc(stats.num_draft_tokens - last.num_draft_tokens)
        self.accepted_tokens.inc(stats.num_accepted_tokens - last.num_accepted_tokens)
        now, before = stats.num_accepted_tokens_per_pos, last.num_accepted_tokens_per_pos
        for counter, n, m in zip(self.per_pos, now, before, strict=True):
            counter.inc(n - m)
        self._last = stats
