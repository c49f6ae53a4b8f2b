"""The router's own view of each model's load: requests it has in flight there, and the limits.

Ray Serve queues requests in the caller's handle when every replica is busy and, by default,
without bound, so the router counts what it sends itself. A model's limits come from its
deployment options: `max_ongoing_requests × replicas` run at once (replicas = `num_replicas`, or
`autoscaling_config.max_replicas`), and `max_queued_requests` more wait in this router's handle
(Ray applies that limit per caller; -1 is unbounded). Counts are per router replica.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from configs.model_config import DeploymentOptions
from router.policy import ModelState


@dataclass(frozen=True)
class ModelLimits:
    """How many requests one model takes from this router.

    Attributes:
        capacity: Requests its replicas run at once.
        queue_limit: Requests that may wait beyond `capacity`; `None` means unbounded.
    """

    capacity: int
    queue_limit: int | None

    @classmethod
    def from_options(cls, options: DeploymentOptions) -> ModelLimits:
        """Limits derived from a model's Ray Serve deployment options."""
        autoscaling = options.autoscaling_config or {}
        replicas = options.num_replicas or int(autoscaling.get("max_replicas", 1))
        queued = options.max_queued_requests
        return cls(options.max_ongoing_requests * replicas, None if queued < 0 else queued)


class LoadTracker:
    """In-flight request counts per model, against each model's limits.

    Args:
        limits: Model id -> its limits.
    """

    def __init__(self, limits: dict[str, ModelLimits]) -> None:
        self.limits = limits
        self.counts: Counter[str] = Counter()

    def acquire(self, model: str) -> None:
        """Count one more request in flight to `model`."""
        self.counts[model] += 1

    def release(self, model: str) -> None:
        """Count one request to `model` as finished."""
        assert self.counts[model] > 0, f"release of {model!r} without a matching acquire"
        self.counts[model] -= 1

    def saturated(self, model: str) -> bool:
        """Whether one more request to `model` would exceed its capacity plus queue limit."""
        limits = self.limits[model]
        if limits.queue_limit is None:
            return False
        return self.counts[model] >= limits.capacity + limits.queue_limit

    def state(self, model: str, healthy: bool) -> ModelState:
        """What the policy sees of `model`: running and queued requests, and the queue limit."""
        limits = self.limits[model]
        count = self.counts[model]
        return ModelState(
            healthy=healthy,
            in_flight=min(count, limits.capacity),
            queued=max(0, count - limits.capacity),
            queue_limit=limits.queue_limit,
        )
