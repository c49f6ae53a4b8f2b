"""A new application on the real stack: while its model replica still loads, `/health` says so
and a request waits for the replica instead of being failed as *down*."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from ray import serve
from serve_helpers import FAST, local_args

from router.app import build_app

pytestmark = pytest.mark.serve

NAME = "cold"


def _health(client: httpx.Client) -> tuple[int, dict | None]:
    resp = client.get("/health")
    is_json = resp.headers.get("content-type", "").startswith("application/json")
    return resp.status_code, resp.json() if is_json else None


def test_request_during_model_start_up_waits_for_the_replica(serve_url: str) -> None:
    args = local_args()
    args["models"] = [m for m in args["models"] if m["model_id"] == FAST]
    args |= {"policy": None, "first_token_timeout_s": 1, "health_probe_timeout_s": 0.5}
    args |= {"router_deployment": {"ray_actor_options": {"num_cpus": 0.05}}}
    # serve.run returns once the app runs: deploy from a thread, test while it starts
    deploy = threading.Thread(
        target=serve.run, args=(build_app(args),), kwargs={"name": NAME, "route_prefix": f"/{NAME}"}
    )
    deploy.start()
    try:
        with httpx.Client(base_url=f"{serve_url}/{NAME}", timeout=300) as client:
            deadline = time.monotonic() + 120
            status, body = _health(client)
            while status == 404 or body is None:  # until the router replica is up
                assert time.monotonic() < deadline, "the router never came up"
                time.sleep(0.2)
                status, body = _health(client)
            # the router is up and polls the controller: the model has no running replica yet
            assert (status, body["status"], body["starting"]) == (503, "unavailable", [FAST])
            assert body["down"] == {}

            # far past first_token_timeout_s: without the controller's word this was a 503
            chat = {"model": FAST, "messages": [{"role": "user", "content": "Hi"}]}
            resp = client.post("/v1/chat/completions", json={**chat, "max_tokens": 4})
            assert resp.status_code == 200, resp.text
            assert resp.json()["usage"]["completion_tokens"] >= 1

            # the controller marks the replica running, and the router reads that within a poll
            deadline = time.monotonic() + 30
            status, body = _health(client)
            while body["status"] != "ok" and time.monotonic() < deadline:
                time.sleep(0.5)
                status, body = _health(client)
            assert (status, body["status"], body["starting"], body["down"]) == (200, "ok", [], {})
    finally:
        deploy.join(timeout=300)
        serve.delete(NAME)
