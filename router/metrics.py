"""Prometheus metrics of the router, served at `GET /metrics` in the text exposition format.

Each router replica keeps its own registry (Prometheus sums replicas when it scrapes each). The
engine metrics of every replica of every model (vLLM names, `model_name` and `replica` labels)
are read from the metrics board (`router.replica_metrics`) and merged in, one metric family per
name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families


class RouterMetrics:
    """Counters of routing decisions, fallbacks, preprocessing and rate limiting."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
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
