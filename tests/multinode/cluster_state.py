"""Where Ray placed things, read from the GCS (this cluster runs no dashboard, so the
`ray.util.state` API is not available)."""

from __future__ import annotations

import ray
from ray.util import placement_group_table


def replica_nodes(deployment: str) -> list[str]:
    """Node ids of the live Serve replicas of `deployment` (actor class `ServeReplica:...`)."""
    from ray._private.state import state

    nodes = []
    for actor in state.actor_table(None).values():
        if actor["State"] != "ALIVE":
            continue
        if actor["ActorClassName"].endswith(f":{deployment}"):
            nodes.append(actor["Address"]["NodeID"])
    return nodes


def rank_nodes() -> list[list[str]]:
    """For each created placement group (one per tensor-parallel engine), the node id of each
    bundle, that is of each rank in order."""
    groups = []
    for group in placement_group_table().values():
        if group["state"] == "CREATED":
            bundles = group["bundles_to_node_id"]
            groups.append([bundles[i] for i in sorted(bundles)])
    return groups


def node_ips() -> dict[str, str]:
    """Node id -> IP of the live nodes, as Ray reports them."""
    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
