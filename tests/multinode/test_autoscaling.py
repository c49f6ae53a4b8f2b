"""Autoscaling on the cluster: `tiny-auto` (`min_replicas: 0`, up to 2 replicas of
`max_ongoing_requests: 2`) starts with no replica; a request queues while one starts (never a
429 for want of one); under load from 4 clients the replica count grows to 2, every request
answered; when the load stops it shrinks back to zero. (The router's capacity, which follows
the live replica count, is tested in tests/router/test_app.py.)"""

from __future__ import annotations

import httpx
from simulated_cluster import SimulatedCluster, wait_for
from traffic import Traffic, chat


def _replicas(http: httpx.Client) -> int | None:
    replicas: int | None = http.get("/health").json()["replicas"]["tiny-auto"]
    return replicas


def test_scale_from_zero_up_under_load_and_back_down(
    cluster: SimulatedCluster, http: httpx.Client
) -> None:
    health = http.get("/health").json()
    assert health["replicas"]["tiny-auto"] == 0 and "tiny-auto" not in health["starting"], health
    assert "tiny-auto" not in health["down"]

    first = chat(http, "tiny-auto", stream=False, max_tokens=8)  # waits for a replica to start
    assert first.completed and first.model == "tiny-auto", first

    traffic = Traffic(cluster.url, "tiny-auto", threads=4, max_tokens=200).start()
    try:
        two = wait_for(lambda: _replicas(http) == 2, 180, "2 replicas")
        # requests started from now on meet the router's capacity for 2 replicas (2 x 2, +4 queued)
        wait_for(lambda: sum(o.start > two + 1.5 for o in traffic.outcomes) >= 8, 180, "load")
    finally:
        outcomes = traffic.stop()
    # every request was answered (never a 429, a 5xx or a hang: Traffic.stop checks that)
    assert all(o.completed for o in outcomes), [o for o in outcomes if not o.completed]
    assert sum(o.start > two + 1.5 for o in outcomes) >= 8

    wait_for(lambda: (n := _replicas(http)) is not None and n < 2, 120, "fewer than 2")
    wait_for(lambda: _replicas(http) == 0, 120, "0 replicas")
