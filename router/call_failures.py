"""How a call to a model failed, and which failures are the replica's fault.

- *saturated*: Ray's `BackPressureError` (the handle's `max_queued_requests` is exceeded) or
  the router's own limit;
- *down* (a replica fault): a first-item timeout, or a replica that died or cannot be reached
  (`RayActorError`, `ReplicaUnavailableError`, ...); the model is marked down until a probe
  succeeds (`router.health`);
- *failed*: the replica's method raised for this request (`RayTaskError`): the replica lives,
  so health is unchanged; the request ends with an opaque 500.
"""

from __future__ import annotations

from typing import Literal

from ray.exceptions import RayActorError, RaySystemError, RayTaskError
from ray.serve.exceptions import DeploymentUnavailableError, ReplicaUnavailableError

FailureKind = Literal["saturated", "down", "failed"]

_REPLICA_FAULTS: tuple[type[BaseException], ...] = (
    RayActorError,
    RaySystemError,
    ReplicaUnavailableError,
    DeploymentUnavailableError,
    TimeoutError,
)
"""Raised by a handle call when no replica could take or finish it."""


def replica_fault(exc: Exception) -> bool:
    """Whether a failed call says the replica is at fault (not this one request)."""
    if isinstance(exc, RayTaskError):  # the method raised: look at what it raised
        return isinstance(exc.cause, _REPLICA_FAULTS)
    return isinstance(exc, _REPLICA_FAULTS)


class CallFailed(Exception):
    """A model did not answer a call.

    Attributes:
        model: The model id.
        kind: `saturated` (over its queue limit), `down` (a replica fault or a timeout; now
            marked down) or `failed` (the replica raised for this request; health unchanged).
    """

    def __init__(self, model: str, kind: FailureKind, detail: str) -> None:
        super().__init__(f"{model}: {kind} ({detail})")
        self.model = model
        self.kind = kind
