"""Ray Serve deployment options of a model or of the router (`deployment`, `router_deployment`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

GRPC_MESSAGE_ENV = "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH"
"""Ray Serve's bound on one message of its gRPC channel between replicas (read by each replica
process at start; Ray's default is gRPC's 4 MiB). The router streams from the models over that
channel (`router.model_caller`), and one request is one message: a request the router's
`request_limits` accept (8 MiB of JSON by default, more once parsed and pickled) must fit."""
GRPC_MESSAGE_BYTES = 2**31 - 1
"""gRPC's own ceiling (a signed 32-bit length), as Ray's `RAY_SERVE_GRPC_MAX_MESSAGE_SIZE`: the
router's `request_limits` bound requests, not the transport."""


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
        description="Resources per replica, e.g. {num_cpus: 0.5} on CPU or {resources: {NPU: 1}}. "
        f"Its `runtime_env.env_vars` get `{GRPC_MESSAGE_ENV}` unless set there: the router "
        "streams from the models over Serve's gRPC channel, whose 4 MiB default would refuse "
        "requests the router accepts.",
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
        """Keyword arguments for `Deployment.options`: these options, and in
        `ray_actor_options.runtime_env.env_vars` Serve's gRPC message bound
        (`GRPC_MESSAGE_ENV`, unless set there already)."""
        options = self.model_dump(exclude_none=True)
        runtime_env = dict(options["ray_actor_options"].get("runtime_env") or {})
        env_vars = dict(runtime_env.get("env_vars") or {})
        env_vars.setdefault(GRPC_MESSAGE_ENV, str(GRPC_MESSAGE_BYTES))
        runtime_env["env_vars"] = env_vars
        options["ray_actor_options"] = {**options["ray_actor_options"], "runtime_env": runtime_env}
        return options
