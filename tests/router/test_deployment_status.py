"""`router.deployment_status.status_from_details`: the controller's details dict (as Ray 2.60's
`ServeController.get_serve_instance_details` returns it) read into `serve.status()`'s shape, and
a dict laid out otherwise refused (the caller then uses `serve.status()`). The live agreement
with `serve.status()` is tested over real Serve (`tests/serve/test_fallback.py`)."""

from __future__ import annotations

from typing import Any

import pytest
from ray.serve._private.common import DeploymentStatus, ReplicaState

from router.deployment_status import deployment_state, status_from_details


def _details(replica_states: list[Any], status: Any = DeploymentStatus.HEALTHY) -> dict[str, Any]:
    deployment = {
        "name": "model-a",
        "status": status,
        "status_trigger": "CONFIG_UPDATE_COMPLETED",
        "message": "",
        "replicas": [{"state": s, "replica_id": str(i)} for i, s in enumerate(replica_states)],
    }
    app = {
        "status": "RUNNING",
        "message": "",
        "last_deployed_time_s": 1.0,
        "deployments": {"model-a": deployment},
    }
    return {"applications": {"app": app}, "target_capacity": None}


def test_replica_states_are_counted_by_name_whether_enums_or_strings() -> None:
    running, starting = ReplicaState.RUNNING, ReplicaState.STARTING
    status = status_from_details(_details([running, running, starting.value]))
    overview = status.applications["app"].deployments["model-a"]
    assert overview.replica_states == {"RUNNING": 2, "STARTING": 1}
    assert deployment_state(status, "app", "model-a").replicas == 2


def test_a_deployment_with_no_running_replica_is_starting_while_updating() -> None:
    status = status_from_details(_details(["STARTING"], DeploymentStatus.UPDATING))
    assert deployment_state(status, "app", "model-a").phase == "starting"


def test_no_applications_is_an_empty_status() -> None:
    assert status_from_details({}).applications == {}


@pytest.mark.parametrize(
    "details",
    [
        {"applications": {"app": {"status": "RUNNING"}}},  # no deployments
        {"applications": {"app": {**_details([])["applications"]["app"], "deployments": 3}}},
    ],
)
def test_another_layout_is_refused(details: dict[str, Any]) -> None:
    with pytest.raises((KeyError, TypeError, AttributeError)):
        status_from_details(details)
