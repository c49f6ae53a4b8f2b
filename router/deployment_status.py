"""What Ray Serve's controller says of each model deployment: serving, starting or failed.

A handle call to a deployment whose replicas are still loading weights waits for one, just as a
call to a dead deployment does; only the controller can tell the two apart. Every `poll_s`
seconds the router asks the controller what `serve.status()` reports (one call, made off the
event loop) and keeps each model's `DeploymentState`. It reads the controller's details dict
and counts replica states from it, as `serve.status()` does, without validating the whole
`ServeInstanceDetails` model first: that validation pickles each deployment's request router
class and cost the router ~22 ms of CPU per poll (27 ms per `serve.status()` against 5 ms for
the dict, Ray 2.60). A Ray whose dict differs falls back to `serve.status()`:

- `serving`: at least one replica is `RUNNING`;
- `starting`: none is running yet and the deployment is `UPDATING`/`UPSCALING` (replicas being
  placed or constructed), so calls should wait for it rather than mark it down;
- `idle`: none is running and none is needed: the deployment is `HEALTHY` with
  `autoscaling_config.min_replicas: 0` and no traffic; a call queues in the handle and the
  autoscaler starts a replica for it, so calls wait as for `starting`;
- `failed`: none is running and the deployment is `DEPLOY_FAILED`/`UNHEALTHY` (the controller's
  message says why);
- `unknown`: not polled yet, or the controller could not be asked (then the router relies on
  its own call timeouts and probes alone).

Status names: `ray.serve._private.common.DeploymentStatus` / `ReplicaState` (Ray 2.60).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import ray
from ray import serve
from ray.serve.handle import DeploymentHandle
from ray.serve.schema import ApplicationStatusOverview, DeploymentStatusOverview, ServeStatus

logger = logging.getLogger(__name__)

Phase = Literal["serving", "starting", "idle", "failed", "unknown"]
_STARTING = {"UPDATING", "UPSCALING", "DOWNSCALING"}


@dataclass(frozen=True)
class DeploymentState:
    """One model deployment as the controller last reported it.

    Attributes:
        phase: see the module docstring.
        message: the controller's message for the deployment (why it failed, what it waits on).
        replicas: replicas in state `RUNNING` (None when `unknown`); the router's capacity
            follows it (`router.load`).
    """

    phase: Phase
    message: str = ""
    replicas: int | None = None


UNKNOWN = DeploymentState("unknown")


def serve_status() -> ServeStatus:
    """What `serve.status()` returns, of the Ray instance this process is connected to, read
    from the controller's details dict (`ServeControllerClient.get_serve_details`) without
    validating it into `ServeInstanceDetails`; `serve.status()` itself when the dict is not laid
    out as in Ray 2.60.

    Raises:
        RuntimeError: this process is not connected to Ray (`serve.status()` would start one).
    """
    if not ray.is_initialized():
        raise RuntimeError("not connected to Ray")
    try:
        # Ray's private client, as `serve.status()` itself uses it; a Ray without it (or
        # laid out otherwise) is read through `serve.status()`
        from ray.serve.context import _get_global_client

        client = _get_global_client(raise_if_no_controller_running=False)
        if client is None:  # Serve has not started
            return ServeStatus()
        return status_from_details(client.get_serve_details())
    except (ImportError, AttributeError, KeyError, TypeError) as exc:
        logger.debug("reading serve details failed (%r); using serve.status()", exc)
        return serve.status()


def status_from_details(details: Mapping[str, Any]) -> ServeStatus:
    """The applications and deployments of a `ServeInstanceDetails` dict, counted as
    `ServeInstanceDetails._get_status` counts them (Ray 2.60 `ray/serve/schema.py`); proxies
    are left out (the router does not read them).

    Raises:
        KeyError, TypeError, AttributeError: `details` is not laid out as Ray 2.60 lays it
            out.
    """
    apps: Mapping[str, Any] = details.get("applications") or {}
    return ServeStatus(
        applications={
            name: ApplicationStatusOverview(
                status=app["status"],
                message=app["message"],
                last_deployed_time_s=app["last_deployed_time_s"],
                deployments={
                    dep_name: DeploymentStatusOverview(
                        status=dep["status"],
                        status_trigger=dep["status_trigger"],
                        replica_states=dict(
                            Counter(
                                getattr(r["state"], "value", r["state"]) for r in dep["replicas"]
                            )
                        ),
                        message=dep["message"],
                    )
                    for dep_name, dep in app["deployments"].items()
                },
            )
            for name, app in apps.items()
        },
        target_capacity=details.get("target_capacity"),
    )


def deployment_state(status: ServeStatus, app_name: str, deployment_name: str) -> DeploymentState:
    """The state of one deployment in a `serve.status()` snapshot (`unknown` if absent)."""
    app = status.applications.get(app_name)
    overview = app.deployments.get(deployment_name) if app is not None else None
    if overview is None:
        return UNKNOWN
    running = overview.replica_states.get("RUNNING", 0)
    if running > 0:
        return DeploymentState("serving", overview.message, running)
    status_name = getattr(overview.status, "value", overview.status)
    phase: Phase = (
        "starting" if status_name in _STARTING else "idle" if status_name == "HEALTHY" else "failed"
    )
    return DeploymentState(phase, overview.message, 0)


class DeploymentStatusView:
    """Per-model `DeploymentState`, refreshed from the Serve controller in the background.

    Args:
        handles: model id -> handle of its deployment (which names the deployment and its
            application).
        poll_s: seconds between two `serve.status()` calls.
        read_status: the status call (`serve_status`; tests script snapshots).
    """

    def __init__(
        self,
        handles: Mapping[str, DeploymentHandle],
        poll_s: float,
        read_status: Callable[[], ServeStatus] = serve_status,
    ) -> None:
        self._names = {m: (h.app_name, h.deployment_name) for m, h in handles.items()}
        self.poll_s = poll_s
        self._read_status = read_status
        self.states: dict[str, DeploymentState] = dict.fromkeys(self._names, UNKNOWN)
        self._task: asyncio.Task[None] | None = None

    def get(self, model: str) -> DeploymentState:
        """The last known state of `model`'s deployment."""
        return self.states[model]

    async def start(self) -> None:
        """Poll once now, then every `poll_s` seconds in the background."""
        if self._task is None:
            await self.refresh()
            self._task = asyncio.get_running_loop().create_task(self._poll_forever())

    async def refresh(self) -> None:
        """Poll the controller once; on failure every model becomes `unknown`."""
        try:
            status = await asyncio.to_thread(self._read_status)
        except Exception as exc:  # noqa: BLE001 - no controller answer: fall back to probes
            logger.info("serve.status() failed: %r", exc)
            self.states = dict.fromkeys(self._names, UNKNOWN)
            return
        new = {m: deployment_state(status, *names) for m, names in self._names.items()}
        for model, state in new.items():
            if state.phase != self.states[model].phase:
                logger.info("model %s deployment: %s %s", model, state.phase, state.message)
        self.states = new

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            await self.refresh()
