"""The router's own view of each model's load: requests it has in flight there, and the limits.

Ray Serve queues requests in the caller's handle when every replica is busy and, by default,
without bound, so the router counts what it sends itself. A model's limits come from its
deployment options and its live replicas: `max_ongoing_requests × replicas` run at once, and
`max_queued_requests` more wait in this router's fair queue (`router.admission`; -1 is
unbounded), so none wait in Ray's handle. Replicas are those the Serve controller last
reported running (`router.deployment_status`), so the capacity follows autoscaling and lost
nodes; with no report yet it is the configured count (`num_replicas`, or
`autoscaling_config.max_replicas`), and with none running (scaled to zero, or starting) it is
one replica's, the one Serve starts for the queued calls. Counts are per router replica.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from configs.deployment_options import DeploymentOptions
from router.policy import ModelState

LiveReplicas = Callable[[str], "int | None"]
"""Model id -> replicas the controller last reported running (None: no report)."""


@dataclass(frozen=True)
class ModelLimits:
    """How many requests one model takes from this router.

    Attributes:
        per_replica: Requests one replica runs at once (`max_ongoing_requests`).
        replicas: Replicas configured (`num_replicas`, or `autoscaling_config.max_replicas`).
        queue_limit: Requests that may wait beyond the capacity; `None` means unbounded.
    """

    per_replica: int
    replicas: int
    queue_limit: int | None

    @classmethod
    def from_options(cls, options: DeploymentOptions) -> ModelLimits:
        """Limits derived from a model's Ray Serve deployment options."""
        _, replicas = options.replica_range()
        queued = options.max_queued_requests
        return cls(options.max_ongoing_requests, replicas, None if queued < 0 else queued)

    def capacity(self, live: int | None) -> int:
        """Requests the model runs at once with `live` running replicas (None: unknown, the
        configured count; 0: the one replica Serve starts for queued calls)."""
        replicas = self.replicas if live is None else max(1, live)
        return self.per_replica * replicas


class LoadTracker:
    """In-flight request counts per model, against each model's limits.

    Args:
        limits: Model id -> its limits.
        live_replicas: Model id -> its running replicas as last reported (None: unknown).
    """

    def __init__(
        self, limits: dict[str, ModelLimits], live_replicas: LiveReplicas = lambda _: None
    ) -> None:
        self.limits = limits
        self.live_replicas = live_replicas
        self.counts: Counter[str] = Counter()

    def acquire(self, model: str) -> None:
        """Count one more request in flight to `model`."""
        self.counts[model] += 1

    def release(self, model: str) -> None:
        """Count one request to `model` as finished."""
        assert self.counts[model] > 0, f"release of {model!r} without a matching acquire"
        self.counts[model] -= 1

    def capacity(self, model: str) -> int:
        """Requests `model`'s live replicas run at once."""
        return self.limits[model].capacity(self.live_replicas(model))

    def full(self, model: str) -> bool:
        """Whether this router's calls in flight to `model` take every slot its live replicas
        have: a slow first answer is then expected, and a health probe would queue behind
        them."""
        return self.counts[model] >= self.capacity(model)

    def saturated(self, model: str) -> bool:
        """Whether one more request to `model` would exceed its capacity plus queue limit."""
        limits = self.limits[model]
        if limits.queue_limit is None:
            return False
        return self.counts[model] >= self.capacity(model) + limits.queue_limit

    def state(self, model: str, healthy: bool) -> ModelState:
        """What the policy sees of `model`: running and queued requests, and the queue limit."""
        capacity = self.capacity(model)
        count = self.counts[model]
        return ModelState(
            healthy=healthy,
            in_flight=min(count, capacity),
            queued=max(0, count - capacity),
            queue_limit=self.limits[model].queue_limit,
        )
