"""Prometheus metrics of the router, served at `GET /metrics` in the text exposition format.

Each router replica keeps its own registry (Prometheus sums replicas when it scrapes each).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest


class RouterMetrics:
    """Counters of routing decisions and fallbacks."""

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

    def render(self) -> bytes:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.registry)
