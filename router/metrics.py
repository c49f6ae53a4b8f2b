"""Prometheus metrics of the router, served at `GET /metrics` in the text exposition format.

Each router replica keeps its own registry (Prometheus sums replicas when it scrapes each). The
engine metrics of every replica of every model (vLLM names, `model_name` and `replica` labels)
are read from the metrics board (`router.replica_metrics`) and merged in, one metric family per
name.

Every series whose labels the config determines starts at 0 (Prometheus' instrumentation
guidance), so a dashboard panel has data before the first event: fallbacks per model and reason,
preprocessing per rule (and model), rate limiting per limit and kind (`per_key` and `per_tenant`
even when unset: nothing is refused by them), queue time and shedding per model and priority
level.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from configs.model_config import RouterAppConfig

FALLBACK_REASONS = ("saturated", "down", "error", "context")
PREPROCESS_RULES = ("system_prompt", "compact_whitespace", "truncation")
TOKEN_SAVING_RULES = ("compact_whitespace", "truncation")
LIMIT_KINDS = ("requests", "tokens")
QUEUE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class RouterMetrics:
    """Counters of routing decisions, fallbacks, preprocessing, rate limiting and admission.

    Args:
        config: The application config: its models, rate limits and priority levels label the
            series that start at 0 (None: none do).
        level_names: The priority level of each engine priority (`router.priorities`).
    """

    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self, config: RouterAppConfig | None = None, level_names: list[str] | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ascend_router_requests",
            "Requests answered after a routing decision, by the model that answered (or was tried "
            "last), the rule that chose it, and the HTTP status.",
            ["model", "rule", "status"],
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "ascend_router_fallbacks",
            "Candidate models that did not take a routed request (the next candidate, if any, was "
            "tried), by model and why: saturated, down, error, context.",
            ["model", "reason"],
            registry=self.registry,
        )
        self.preprocess_applied = Counter(
            "ascend_router_preprocess_applied",
            "Requests that a preprocessing rule changed, by rule: system_prompt, "
            "compact_whitespace, truncation.",
            ["rule"],
            registry=self.registry,
        )
        self.preprocess_tokens_saved = Counter(
            "ascend_router_preprocess_tokens_saved",
            "Prompt tokens saved by preprocessing (counted with the model's tokenizer), by rule "
            "(compact_whitespace, truncation) and model.",
            ["rule", "model"],
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "ascend_router_rate_limited",
            "Requests refused with 429 by a rate limit, by limit (key:<name>, per_key, "
            "tenant:<tenant>, per_tenant) and kind (requests, tokens).",
            ["limit", "kind"],
            registry=self.registry,
        )
        self.queue_seconds = Histogram(
            "ascend_router_queue_seconds",
            "Seconds requests waited in this router's queue for a slot of the model (0 when one "
            "was free), by model and priority level.",
            ["model", "priority"],
            buckets=QUEUE_BUCKETS_S,
            registry=self.registry,
        )
        self.shed = Counter(
            "ascend_router_shed",
            "Requests this router's admission answered 429 (shed from a full queue, or no slot "
            "within response_timeout_s), by model and priority level.",
            ["model", "priority"],
            registry=self.registry,
        )
        if config is not None:
            self._start_at_zero(config, level_names or [])

    def _start_at_zero(self, config: RouterAppConfig, levels: list[str]) -> None:
        """Create the series whose labels the config knows, at 0."""
        bases = [m.model_id for m in config.models]
        models = [*bases, *(name for m in config.models for name in m.adapters)]
        for model in models:
            for reason in FALLBACK_REASONS:
                self.fallbacks.labels(model, reason)
            for rule in TOKEN_SAVING_RULES:
                self.preprocess_tokens_saved.labels(rule, model)
        for rule in PREPROCESS_RULES:
            self.preprocess_applied.labels(rule)
        limits = config.rate_limits
        names = ["per_key", "per_tenant", *(f"key:{k}" for k in limits.keys)]
        for limit in [*names, *(f"tenant:{t}" for t in limits.tenants)]:
            for kind in LIMIT_KINDS:
                self.rate_limited.labels(limit, kind)
        for model in bases:
            for level in levels:
                self.queue_seconds.labels(model, level)
                self.shed.labels(model, level)

    def render(self, model_expositions: Iterable[bytes] = ()) -> bytes:
        """The router's metrics plus the models' (text exposition format, each family once)."""
        merged = _Merged(model_expositions)
        return generate_latest(self.registry) + generate_latest(_registry_of(merged))


class _Merged:
    """A collector yielding the families of several expositions, samples of a name merged."""

    def __init__(self, texts: Iterable[bytes]) -> None:
        self.families: dict[str, Metric] = {}
        for text in texts:
            for family in text_string_to_metric_families(text.decode()):
                known = self.families.setdefault(family.name, family)
                if known is not family:
                    known.samples.extend(family.samples)

    def collect(self) -> Iterator[Metric]:
        yield from self.families.values()


def _registry_of(collector: _Merged) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    return registry
