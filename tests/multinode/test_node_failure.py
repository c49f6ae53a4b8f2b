"""A node lost under traffic: no hang, fallback by policy, `/health` reporting the model down,
and recovery once a node with the resources joins again, without restarting the router. The
same for a tensor-parallel model that loses the node of one of its ranks.

The measured recovery times and request counts go to the JSON file named by
`ASCEND_ROUTER_MULTINODE_REPORT`, if set (the closing notes quote them)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx
from cluster_state import rank_nodes
from simulated_cluster import SimulatedCluster, wait_for
from traffic import Outcome, Traffic, chat


def _report(name: str, figures: dict[str, Any]) -> None:
    print(f"{name}: {json.dumps(figures)}")
    path = os.environ.get("ASCEND_ROUTER_MULTINODE_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": name, **figures}) + "\n")


def _serves(http: httpx.Client, model: str) -> bool:
    outcome = chat(http, model, stream=False, max_tokens=4)
    return outcome.completed and outcome.model == model


def test_losing_a_models_node_falls_back_then_recovers(
    cluster: SimulatedCluster, http: httpx.Client
) -> None:
    traffic = Traffic(cluster.url, "auto", max_tokens=64).start()  # smol-a, then smol-b
    try:
        wait_for(lambda: sum(o.completed for o in traffic.outcomes) >= 3, 120, "traffic")
        wait_for(lambda: traffic.streaming_for(1.0), 120, "a stream under way")
        lost = time.monotonic()
        cluster.remove("node_a")
        down = wait_for(lambda: "smol-a" in http.get("/health").json()["down"], 60, "down")

        def served_while_down() -> int:
            return sum(o.start > down + 1 for o in traffic.outcomes)

        wait_for(lambda: served_while_down() >= 2, 180, "requests while smol-a is down")
        rejoined = time.monotonic()
        cluster.add("node_a")
        back = wait_for(lambda: _serves(http, "smol-a"), 240, "smol-a to serve again")
        health = http.get("/health").json()
    finally:
        outcomes = traffic.stop()  # asserts that no request hung

    assert "smol-a" not in health["down"] and health["replicas"]["smol-a"] == 1, health
    during = [o for o in outcomes if lost <= o.end]
    errored = [o for o in during if not o.completed]
    in_flight_at_loss = [o for o in outcomes if o.start < lost < o.end]
    # Only requests already streaming from smol-a may fail (a mid-stream error event); the rest
    # fell over to smol-b, or were sent there in the first place.
    assert all(o.stream and o.status == 200 for o in errored), errored
    assert len(errored) <= len(in_flight_at_loss), (errored, in_flight_at_loss)
    assert any(o.stream for o in in_flight_at_loss)
    after_down = [o for o in outcomes if down + 1 < o.start < rejoined]
    timeline = [(round(o.start - lost, 1), round(o.end - lost, 1), o.stream, o.status, o.model,
                 o.fallback, (o.error or "")[:120]) for o in outcomes]  # fmt: skip
    timeline.append(("down", round(down - lost, 1), "rejoined", round(rejoined - lost, 1)))
    print("\n".join(map(str, timeline)))
    assert after_down and all(o.completed and o.model == "smol-b" for o in after_down), timeline
    assert any("smol-a" in o.fallback for o in during), "no request fell over to smol-b"
    _report(
        "node_loss",
        {
            "down_detected_s": round(down - lost, 2),
            "recovered_after_loss_s": round(back - lost, 2),
            "recovered_after_rejoin_s": round(back - rejoined, 2),
            "requests_during": len(during),
            "completed_during": len(during) - len(errored),
            "errored_during": len(errored),
            "fell_over": sum(bool(o.fallback) for o in during),
        },
    )


def test_a_tensor_parallel_model_recovers_from_losing_a_ranks_node(
    cluster: SimulatedCluster, http: httpx.Client
) -> None:
    # (the previous test's node loss may have taken one of these ranks: wait for the new ones)
    wait_for(lambda: len(rank_nodes()) == 1 and _serves(http, "tiny-tp"), 240, "tiny-tp")
    (ranks,) = rank_nodes()
    names = {node.node_id: name for name, node in cluster.nodes.items()}
    victim = next(names[n] for n in reversed(ranks) if n in names)  # a worker node, not the head
    lost = time.monotonic()
    victim_id = cluster.remove(victim)
    outcomes: list[Outcome] = []

    def serving_again() -> bool:
        outcomes.append(chat(http, "tiny-tp", stream=False, max_tokens=4))
        return outcomes[-1].completed

    back = wait_for(serving_again, 240, "tiny-tp to serve again")

    def ranks_replaced() -> bool:  # the GCS drops the old placement group a moment later
        groups = rank_nodes()
        return len(groups) == 1 and len(set(groups[0])) == 2 and victim_id not in groups[0]

    wait_for(
        ranks_replaced, 60, f"one placement group of 2 nodes without the lost one: {rank_nodes()}"
    )
    # every request in between ended, with an answer or an error, none hung (chat's timeout)
    assert all(o.end - o.start < 60 for o in outcomes), outcomes
    cluster.add(victim)
    _report(
        "tp_rank_loss",
        {
            "recovered_after_loss_s": round(back - lost, 2),
            "requests_during": len(outcomes),
            "errored_during": sum(not o.completed for o in outcomes),
        },
    )
