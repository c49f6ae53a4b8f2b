"""Ray Serve deployment options of a model or of the router (`deployment`, `router_deployment`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class DeploymentOptions(BaseModel):
    """Ray Serve deployment options passed through to `.options(...)`."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int | None = Field(None, ge=1, description="Fixed replica count.")
    autoscaling_config: dict[str, Any] | None = Field(
        None, description="Ray Serve autoscaling config (instead of num_replicas)."
    )
    max_ongoing_requests: int = Field(
        64, ge=1, description="Requests a replica runs at once (Ray's default of 5 is too low)."
    )
    max_queued_requests: int = Field(
        256, ge=-1, description="Requests queued in callers' handles before they fail fast."
    )
    ray_actor_options: dict[str, Any] = Field(
        default_factory=lambda: {"num_cpus": 0.5},
        description="Resources per replica, e.g. {num_cpus: 0.5} on CPU or {resources: {NPU: 1}}.",
    )
    health_check_period_s: float | None = Field(
        None,
        gt=0,
        description="Seconds between two `check_health` calls on a replica (Serve's default: 10); "
        "three failed checks in a row replace it (a dead engine or tensor-parallel rank).",
    )
    health_check_timeout_s: float | None = Field(
        None, gt=0, description="Seconds a `check_health` call may take (Serve's default: 30)."
    )

    @field_validator("ray_actor_options")
    @classmethod
    def _resource_amounts(cls, value: dict[str, Any]) -> dict[str, Any]:
        """`resources` maps resource names (e.g. `NPU`) to non-negative finite amounts, as Ray
        requires; a list or a negative count would otherwise fail only when Serve starts."""
        resources = value.get("resources")
        if resources is None:
            return value
        if not isinstance(resources, dict):
            raise ValueError(f"resources must be a mapping like {{NPU: 1}}, got {resources!r}")
        for name, amount in resources.items():
            if (
                not isinstance(name, str)
                or isinstance(amount, bool)
                or not isinstance(amount, int | float)
                or not 0 <= amount < float("inf")
            ):
                raise ValueError(
                    f"resources.{name}: need a non-negative number of units, got {amount!r}"
                )
        return value

    @field_validator("autoscaling_config")
    @classmethod
    def _known_autoscaling_fields(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """Checked against Ray Serve's own `AutoscalingConfig` (field names, bounds), so that a
        typo fails at validation, not at `serve run`."""
        if value is not None:
            from ray.serve.config import AutoscalingConfig

            unknown = sorted(set(value) - set(AutoscalingConfig.model_fields))
            if unknown:
                known = ", ".join(sorted(AutoscalingConfig.model_fields))
                raise ValueError(f"unknown autoscaling_config fields {unknown}; known: {known}")
            AutoscalingConfig.model_validate(value)
        return value

    def replica_range(self) -> tuple[int, int]:
        """(smallest, largest) replica count, as Ray Serve reads these options:
        `autoscaling_config`'s `min_replicas` / `max_replicas` (1 / 1 when omitted), else
        `num_replicas` (1 when omitted)."""
        if self.autoscaling_config is None:
            count = self.num_replicas or 1
            return count, count
        autoscaling = self.autoscaling_config
        return autoscaling.get("min_replicas", 1), autoscaling.get("max_replicas", 1)

    def serve_options(self) -> dict[str, Any]:
        """Keyword arguments for `Deployment.options`."""
        return self.model_dump(exclude_none=True)
