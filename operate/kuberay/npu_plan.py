"""How many NPUs one node must offer, and how many NPU nodes a router config fills.

A replica's NPUs must share a node: with `tensor_parallel_size` 1 the replica actor holds
`ray_actor_options.resources.NPU` itself; with more ranks each rank reserves one `NPU` in a
placement group that is `STRICT_PACK` by default (`engine.tensor_parallel_placement`, see
`engine/parallel/ray_executor.py`), so the whole group lands on one node. Other placements let the
ranks spread, one NPU each; `STRICT_SPREAD` also puts each rank of a replica on its own node, so
such a deployment needs at least `tensor_parallel_size` nodes. Worker counts come from
first-fit-decreasing packing of these groups into nodes of `npus_per_node`, at the deployments'
smallest and largest replica counts (fixed `num_replicas`, or `autoscaling_config.min_replicas` /
`max_replicas` as Ray Serve reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from configs.model_config import ModelDeploymentConfig, RouterAppConfig

_EPSILON = 1e-9
"""Slack for fractional NPU requests (e.g. 0.5) when they add up to a whole node."""


@dataclass(frozen=True)
class NpuGroup:
    """NPUs that must sit on one node, and how many such groups the deployment runs.

    Attributes:
        model_id: the deployment the group belongs to.
        npus: NPUs of one group (a TP 1 replica, or the ranks of one STRICT_PACK replica).
        min_count: groups at the deployment's smallest replica count.
        max_count: groups at its largest replica count.
        distinct_nodes: nodes the deployment needs at least whenever it runs a replica (its
            ranks, TP × PP, under `STRICT_SPREAD`, else 1).
    """

    model_id: str
    npus: float
    min_count: int
    max_count: int
    distinct_nodes: int = 1


def replica_bounds(model: ModelDeploymentConfig) -> tuple[int, int]:
    """(smallest, largest) replica count of a deployment, as Ray Serve reads its options.

    Autoscaling wins over `num_replicas`; Ray Serve's defaults are 1 replica, and
    `min_replicas` 1 / `max_replicas` 1 when autoscaling omits them.

    Raises:
        ValueError: the autoscaling bounds are not integers or `min_replicas > max_replicas`.
    """
    low, high = model.deployment.replica_range()
    if not isinstance(low, int) or not isinstance(high, int) or not 0 <= low <= high:
        raise ValueError(
            f"{model.model_id}: autoscaling_config needs integers 0 <= min_replicas <= "
            f"max_replicas, got min_replicas={low!r}, max_replicas={high!r}"
        )
    return low, high


def npu_groups(config: RouterAppConfig) -> list[NpuGroup]:
    """Every group of NPUs the config's deployments place, largest first.

    A CPU-only deployment (no `NPU` resource, `tensor_parallel_size` 1) places none.
    """
    groups: list[NpuGroup] = []
    for model in config.models:
        low, high = replica_bounds(model)
        resources = model.deployment.ray_actor_options.get("resources") or {}
        own = float(resources.get("NPU", 0))
        tp = model.num_ranks  # TP × PP ranks, one NPU each
        placement = model.engine.tensor_parallel_placement
        spread = tp if tp > 1 and placement == "STRICT_SPREAD" else 1
        if tp > 1 and model.engine.tensor_parallel_placement == "STRICT_PACK":
            sizes = [own + tp]
        elif tp > 1:
            sizes = [1.0] * tp + ([own] if own else [])
        else:
            sizes = [own] if own else []
        groups += [NpuGroup(model.model_id, size, low, high, spread) for size in sizes]
    return sorted(groups, key=lambda g: -g.npus)


def nodes_needed(groups: list[NpuGroup], npus_per_node: float, at: Literal["min", "max"]) -> int:
    """Nodes of `npus_per_node` NPUs that hold every group at the smallest or largest size.

    First-fit decreasing: each group goes to the first node with room, largest groups first.
    That is within 11/9 of the optimum plus one node, and exact for the usual shapes (groups of
    1, 2, 4 and 8 NPUs on 8-NPU nodes). A `STRICT_SPREAD` deployment with replicas raises the
    count to its `distinct_nodes` (its ranks are one NPU each, so they fit round-robin).

    Raises:
        ValueError: a group is larger than one node (names the model and the fix).
    """
    free: list[float] = []
    floor = 0
    for group in sorted(groups, key=lambda g: -g.npus):
        if group.npus > npus_per_node + _EPSILON:
            raise ValueError(
                f"{group.model_id}: one replica needs {group.npus:g} NPUs on one node but a "
                f"worker has {npus_per_node:g}; raise --npus-per-worker or lower "
                "tensor_parallel_size"
            )
        count = group.min_count if at == "min" else group.max_count
        if count:
            floor = max(floor, group.distinct_nodes)
        for _ in range(count):
            for i, room in enumerate(free):
                if group.npus <= room + _EPSILON:
                    free[i] = room - group.npus
                    break
            else:
                free.append(npus_per_node - group.npus)
    return max(len(free), floor)
