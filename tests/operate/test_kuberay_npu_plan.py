"""NPU groups of a router config and the NPU worker nodes they fill (operate/kuberay/npu_plan.py)."""

from __future__ import annotations

from typing import Any

import pytest

from configs.model_config import RouterAppConfig
from operate.kuberay.npu_plan import NpuGroup, nodes_needed, npu_groups, replica_bounds


def make_model(model_id: str, tp: int = 1, npus: float = 1, **deployment: Any) -> dict:
    """A model entry of the router args: `npus` on the replica (TP 1), `tp` ranks otherwise."""
    resources = {"resources": {"NPU": npus}} if npus and tp == 1 else {}
    return {
        "model_id": model_id,
        "source": {"path": f"/models/{model_id}"},
        "tensor_parallel_size": tp,
        "deployment": {"ray_actor_options": {"num_cpus": 1, **resources}, **deployment},
    }


def make_config(*models: dict, placement: str | None = None) -> RouterAppConfig:
    if placement is not None:
        for model in models:
            model["engine"] = {"tensor_parallel_placement": placement}
    return RouterAppConfig.model_validate({"models": list(models)})


def test_groups_follow_replica_and_rank_resources() -> None:
    config = make_config(
        make_model("tp1", autoscaling_config={"min_replicas": 1, "max_replicas": 3}),
        make_model("tp4", tp=4, num_replicas=2),
        make_model("cpu", npus=0),
    )
    assert npu_groups(config) == [NpuGroup("tp4", 4, 2, 2), NpuGroup("tp1", 1, 1, 3)]


def test_spread_placements_let_ranks_land_on_different_nodes() -> None:
    config = make_config(make_model("wide", tp=8), placement="PACK")
    groups = npu_groups(config)
    assert [g.npus for g in groups] == [1.0] * 8
    assert nodes_needed(groups, 4, "min") == 2


def test_a_strict_pack_group_wider_than_a_node_names_the_model() -> None:
    groups = npu_groups(make_config(make_model("big", tp=8)))
    assert nodes_needed(groups, 8, "min") == 1
    with pytest.raises(ValueError, match="big: one replica needs 8 NPUs on one node"):
        nodes_needed(groups, 4, "min")


@pytest.mark.parametrize(
    ("models", "npus_per_node", "expected"),
    [
        # 4 + 4 on one node, 4 + 1 + 1 + 1 + 1 on another: first fit, largest first
        ([make_model("a", tp=4, num_replicas=3), make_model("b", num_replicas=4)], 8, (2, 2)),
        # fractional replicas share a card
        ([make_model("half", npus=0.5, num_replicas=4)], 8, (1, 1)),
        # an autoscaling floor of 0 needs no node; its ceiling does
        ([make_model("z", autoscaling_config={"min_replicas": 0, "max_replicas": 9})], 8, (0, 2)),
        # CPU-only deployments place no NPU
        ([make_model("cpu", npus=0, num_replicas=5)], 8, (0, 0)),
    ],
    ids=["ffd", "fractional", "scale-from-zero", "cpu-only"],
)
def test_nodes_needed_at_smallest_and_largest_sizes(
    models: list[dict], npus_per_node: int, expected: tuple[int, int]
) -> None:
    groups = npu_groups(make_config(*models))
    assert (
        nodes_needed(groups, npus_per_node, "min"),
        nodes_needed(groups, npus_per_node, "max"),
    ) == expected


def test_replica_bounds_read_serve_defaults_and_reject_bad_autoscaling() -> None:
    config = make_config(
        make_model("default"),
        make_model("fixed", num_replicas=3),
        make_model("scaled", autoscaling_config={"max_replicas": 5}),
        make_model("bad", autoscaling_config={"min_replicas": 2, "max_replicas": 4}),
    )
    assert [replica_bounds(m) for m in config.models[:3]] == [(1, 1), (3, 3), (1, 5)]
    # the config's validation (Ray's AutoscalingConfig) refuses min > max; the plan checks again
    config.models[3].deployment.autoscaling_config = {"min_replicas": 4, "max_replicas": 2}
    with pytest.raises(ValueError, match="bad: autoscaling_config needs"):
        replica_bounds(config.models[3])


def test_strict_spread_needs_one_node_per_rank() -> None:
    spread = npu_groups(make_config(make_model("wide", tp=4), placement="STRICT_SPREAD"))
    assert {g.distinct_nodes for g in spread} == {4}
    assert nodes_needed(spread, 8, "min") == 4
    # PACK and SPREAD may put the ranks on one node: the floor stays the packed count
    for placement in ("PACK", "SPREAD"):
        packed = npu_groups(make_config(make_model("wide", tp=4), placement=placement))
        assert nodes_needed(packed, 8, "min") == 1
    # a deployment scaled to zero needs no node at its smallest size
    idle = make_model("idle", tp=4, autoscaling_config={"min_replicas": 0, "max_replicas": 2})
    groups = npu_groups(make_config(idle, placement="STRICT_SPREAD"))
    assert (nodes_needed(groups, 8, "min"), nodes_needed(groups, 8, "max")) == (0, 4)
