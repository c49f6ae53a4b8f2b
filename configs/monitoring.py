"""How model replicas report their engine metrics to the router (`deployments.metrics.board`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class MonitoringConfig(BaseModel):
    """Settings of the metrics board every model replica reports to.

    Each replica pushes its Prometheus exposition every `push_interval_s`; the router's
    `/metrics` serves what every replica pushed last, so its figures are at most that old. A
    replica silent for `replica_ttl_s` (crashed, hung, or removed without a clean shutdown)
    is dropped from `/metrics`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    push_interval_s: float = Field(
        2.0, gt=0, description="Seconds between two pushes of one replica's metrics."
    )
    replica_ttl_s: float = Field(
        15.0,
        gt=0,
        description="Seconds after its last push that a replica's metrics are dropped; "
        "several push intervals, so that one late push does not hide a live replica.",
    )

    @model_validator(mode="after")
    def _ttl_spans_pushes(self) -> MonitoringConfig:
        if self.replica_ttl_s < 2 * self.push_interval_s:
            raise ValueError(
                f"replica_ttl_s ({self.replica_ttl_s}) must be at least twice push_interval_s "
                f"({self.push_interval_s}), e.g. replica_ttl_s: {5 * self.push_interval_s}"
            )
        return self
