"""Autoscaling on the cluster: `tiny-auto` (`min_replicas: 0`, up to 2 replicas of
`max_ongoing_requests: 2`) starts with no replica; a request queues while one starts (never a
429 for want of one); under load from 4 clients the replica count grows to 2, every request
answered; when the load stops it shrinks back to zero. (The router's capacity, which follows
the live replica count, is tested in tests/router/test_app.py.)"""

from __future__ import annotations

import time

import httpx
from simulated_cluster import SimulatedCluster
from traffic import Traffic, chat


def _replicas(http: httpx.Client) -> int | None:
    replicas: int | None = http.get("/health").json()["replicas"]["tiny-auto"]
    return replicas


def _wait_replicas(http: httpx.Client, ok: object, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while not ok(_replicas(http)):  # type: ignore[operator]
        assert time.monotonic() < deadline, http.get("/health").json()
        time.sleep(0.25)
    return time.monotonic()


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
        two = _wait_replicas(http, lambda n: n == 2, 180)
        # requests started from now on meet the router's capacity for 2 replicas (2 + 2 + 1)
        deadline = time.monotonic() + 180
        while sum(o.start > two + 1.5 for o in traffic.outcomes) < 8:
            assert time.monotonic() < deadline, traffic.outcomes
            time.sleep(0.25)
    finally:
        outcomes = traffic.stop()
    # every request was answered (never a 429, a 5xx or a hang: Traffic.stop checks that)
    assert all(o.completed for o in outcomes), [o for o in outcomes if not o.completed]
    assert sum(o.start > two + 1.5 for o in outcomes) >= 8

    _wait_replicas(http, lambda n: n is not None and n < 2, 120)
    _wait_replicas(http, lambda n: n == 0, 120)
