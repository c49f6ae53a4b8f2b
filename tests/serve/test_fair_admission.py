"""Fair, priority-aware admission on the real stack: a flooding tenant does not raise another
tenant's error rate above 0.

A side application serves one small model that runs 1 request at a time with 4 queued in the
router (`router.admission`). Tenant `flood` (level batch) keeps 16 requests in the air while
tenant `steady` (level interactive) sends 5 one after another: every steady request is answered
200 (a full queue sheds a batch request to make room, and the interactive one is released
first), the flood gets 429s with `Retry-After`, every flood request ends (200 or 429, never a
5xx or a hang), and `/metrics` counts the batch requests shed.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from dashboards import Exposition
from serve_helpers import side_app, side_model

pytestmark = pytest.mark.serve

MODEL = "fair-model"
FLOODERS = 16
STEADY_REQUESTS = 5
PRIORITIES = {
    "levels": ["interactive", "standard", "batch"],
    "default": "standard",
    "tenants": {"flood": {"level": "batch"}, "steady": {"level": "interactive"}},
}
DEPLOYMENT = {"max_ongoing_requests": 1, "max_queued_requests": 4, "ray_actor_options": {"num_cpus": 0.25}}  # fmt: skip


def chat(client: httpx.Client, tenant: str, content: str) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8}
    headers = {"x-ascend-router-tenant": tenant}
    return client.post("/v1/chat/completions", json=body, headers=headers, timeout=60)


def flood(client: httpx.Client, stop: threading.Event) -> list[tuple[int, str | None]]:
    """Send batch requests back to back until `stop`: (status, Retry-After) of each."""
    ended: list[tuple[int, str | None]] = []
    while not stop.is_set():
        resp = chat(client, "flood", "Write a long story about the sea.")
        ended.append((resp.status_code, resp.headers.get("retry-after")))
        if resp.status_code == 429:
            stop.wait(0.1)  # a client that retries soon, not at once: keeps the test's CPU low
    return ended


def test_a_flooding_tenant_does_not_fail_another_tenant(serve_url: str) -> None:
    model = side_model(MODEL, deployment=DEPLOYMENT)
    with side_app(serve_url, "fair", [model], priorities=PRIORITIES) as client:
        stop = threading.Event()
        with ThreadPoolExecutor(FLOODERS) as pool:
            flooders = [pool.submit(flood, client, stop) for _ in range(FLOODERS)]
            steady: list[Any] = []
            try:
                stop.wait(1.0)  # the flood fills the slot and the queue first
                for i in range(STEADY_REQUESTS):
                    resp = chat(client, "steady", f"Say the number {i}.")
                    steady.append((resp.status_code, resp.text[:200]))
            finally:
                stop.set()
            floods = [ended for f in flooders for ended in f.result(timeout=90)]
        assert [status for status, _ in steady] == [200] * STEADY_REQUESTS, steady
        assert {status for status, _ in floods} <= {200, 429}, floods
        assert any(status == 429 for status, _ in floods), "the flood was never shed"
        assert all(after for status, after in floods if status == 429), "429 without Retry-After"
        metrics = Exposition.parse(client.get("/metrics").text)
        assert metrics.total("ascend_router_shed_total", model=MODEL, priority="batch") > 0
        assert metrics.total("ascend_router_shed_total", model=MODEL, priority="interactive") == 0
        waited = metrics.total("ascend_router_queue_seconds_count", priority="interactive")
        assert waited == STEADY_REQUESTS, "every steady request is in the queue-time histogram"
