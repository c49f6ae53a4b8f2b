"""The metrics board: where every model replica of an application reports its engine metrics.

A `DeploymentHandle` call reaches one replica of a deployment, so the router cannot scrape every
replica through the models' handles; and a call into a replica waits for one of its
`max_ongoing_requests` slots, so a saturated replica (when its figures matter most) would not
answer a scrape in time. Instead each `ModelServer` replica pushes its exposition, labelled with
its replica id, every `push_interval_s` from a thread of its own (`deployments.metrics.push`) to
this one small deployment of the application, and the router's `/metrics` reads them all here.
Replicas leave by a clean shutdown (`drop`) or by falling silent for `replica_ttl_s` (a crash,
a hung process). Serve runs the board like any deployment: it starts and stops with the
application and is restarted if it dies (the replicas' next pushes fill it again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from ray import serve

from configs.monitoring import MonitoringConfig

METRICS_BOARD = "metrics-board"
"""The board's deployment name in every application `router.app.build_app` builds."""


@dataclass(frozen=True)
class _Report:
    model_id: str
    exposition: bytes
    at: float


class ReplicaReports:
    """The latest exposition of each replica, until it is dropped or goes stale.

    Args:
        ttl_s: seconds after its last push that a replica counts as gone.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._reports: dict[str, _Report] = {}

    def push(self, replica_id: str, model_id: str, exposition: bytes) -> None:
        """Record a replica's current exposition (replacing its previous one)."""
        self._reports[replica_id] = _Report(model_id, exposition, self._clock())

    def drop(self, replica_id: str) -> None:
        """Forget a replica that is shutting down (unknown ids are ignored)."""
        self._reports.pop(replica_id, None)

    def latest(self, model_ids: Collection[str]) -> list[bytes]:
        """The expositions of the live replicas of `model_ids`, forgetting stale replicas."""
        oldest = self._clock() - self._ttl_s
        for replica_id in [k for k, r in self._reports.items() if r.at < oldest]:
            del self._reports[replica_id]
        return [r.exposition for r in self._reports.values() if r.model_id in model_ids]


@serve.deployment(
    name=METRICS_BOARD,
    num_replicas=1,
    max_ongoing_requests=1000,  # pushes and reads are dictionary operations
    ray_actor_options={"num_cpus": 0},
    logging_config={"enable_access_log": False},  # a push per replica every push_interval_s
)
class MetricsBoard:
    """The application's metrics board (one replica; its state is rebuilt by the next pushes).

    Args:
        config: the monitoring settings (a `MonitoringConfig` or its dict).
    """

    def __init__(self, config: MonitoringConfig | dict[str, Any]) -> None:
        self.reports = ReplicaReports(MonitoringConfig.model_validate(config).replica_ttl_s)

    async def push(self, replica_id: str, model_id: str, exposition: bytes) -> None:
        """A model replica's current Prometheus exposition."""
        self.reports.push(replica_id, model_id, exposition)

    async def drop(self, replica_id: str) -> None:
        """A model replica shutting down."""
        self.reports.drop(replica_id)

    async def expositions(self, model_ids: list[str]) -> list[bytes]:
        """The live replicas' expositions of these models (Prometheus text, one per replica)."""
        return self.reports.latest(set(model_ids))
