"""Fallback on the real stack: a saturated model (a second router with tiny limits in front of
the same replicas) and a killed model replica (the local app itself, restored afterwards)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from typing import Any

import httpx
import pytest
import ray
from ray import serve
from serve_helpers import FAST, MODEL, extra_router, local_args

from router.app import APP_NAME, model_deployment_name
from router.deployment_status import serve_status
from router.dispatch import (
    FALLBACK_HEADER,
    MODEL_HEADER,
    REASON_HEADER,
    REPLICA_HEADER,
    RULE_HEADER,
)

pytestmark = pytest.mark.serve

HI = [{"role": "user", "content": "Count from one to one thousand."}]
LONG_RUNNING = {"messages": HI, "max_tokens": 1000, "ignore_eos": True, "stream": True}
GREEDY_SHORT = {"messages": HI, "max_tokens": 8, "temperature": 0}


@pytest.fixture(scope="module")
def tiny_router(serve_url: str) -> Iterator[str]:
    """A router over the local models that admits one request per model (no queue)."""
    args = local_args()
    for model in args["models"]:
        model["deployment"] |= {"max_ongoing_requests": 1, "max_queued_requests": 0}
    with extra_router(serve_url, "tiny", args) as url:
        yield url


def _hold(stack: ExitStack, client: httpx.Client) -> tuple[httpx.Response, Iterator[str]]:
    """Start a long stream and read its first event; it stays open while its lines are held
    (a dropped line iterator closes the response)."""
    resp = stack.enter_context(client.stream("POST", "/v1/chat/completions", json=LONG_RUNNING))
    assert resp.status_code == 200
    lines = resp.iter_lines()
    assert next(lines).startswith("data: ")
    return resp, lines


def test_saturated_model_falls_over_then_all_saturated_is_429(tiny_router: str) -> None:
    with ExitStack() as stack:
        client = stack.enter_context(httpx.Client(base_url=tiny_router, timeout=120))
        first, _first_lines = _hold(stack, client)
        assert (first.headers[MODEL_HEADER], first.headers[RULE_HEADER]) == (MODEL, "default")
        second, _second_lines = _hold(stack, client)
        assert second.headers[MODEL_HEADER] == FAST
        assert second.headers[FALLBACK_HEADER] == MODEL
        for stream in (False, True):
            resp = client.post("/v1/chat/completions", json={**LONG_RUNNING, "stream": stream})
            assert resp.status_code == 429, resp.text
            assert resp.headers["retry-after"] == "1"
            assert resp.headers[MODEL_HEADER] == FAST
            assert resp.headers[FALLBACK_HEADER] == MODEL
            assert resp.json()["error"]["code"] == "rate_limit_exceeded"
    with httpx.Client(base_url=tiny_router, timeout=120) as client:
        deadline = time.monotonic() + 60
        while True:  # the closed streams are released once their cancellation lands
            resp = client.post("/v1/chat/completions", json={**GREEDY_SHORT, "max_tokens": 200})
            if resp.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert resp.status_code == 200 and resp.headers[MODEL_HEADER] == MODEL, resp.text


def _kill_replicas(model: str) -> int:
    tag = f"#{model_deployment_name(model)}#"
    actors = [a for a in ray.util.list_named_actors(all_namespaces=True) if tag in a["name"]]
    for actor in actors:
        handle = ray.get_actor(actor["name"], namespace=actor["namespace"])
        ray.kill(handle, no_restart=True)
        with suppress(ray.exceptions.RayActorError):  # gone once this fails:
            while True:  # `ray.kill` only sends the signal
                ray.get(handle.__ray_ready__.remote(), timeout=30)
                time.sleep(0.05)
    return len(actors)


def _post(http: httpx.Client, body: dict[str, Any], stream: bool) -> httpx.Response:
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": stream}) as resp:
        resp.read()
    return resp


def test_killed_model_falls_over_without_client_error(http: httpx.Client) -> None:
    """Every request after fast's replica is killed succeeds: answered by long, which names
    fast as tried (or unhealthy), until Serve's replacement replica of fast is up; fast
    answers only from that replacement, never from the killed one. (The replacement may be up
    within the first request's wait: how fast Serve restarts it is not the router's to fix.)"""
    before = _post(http, GREEDY_SHORT, stream=False)
    assert before.headers[MODEL_HEADER] == FAST
    killed = before.headers[REPLICA_HEADER]
    assert _kill_replicas(FAST) == 1
    for stream in (False, True, False):
        resp = _post(http, GREEDY_SHORT, stream)
        assert resp.status_code == 200, resp.text
        assert resp.headers[RULE_HEADER] == "short-greedy"
        if resp.headers[MODEL_HEADER] == FAST:
            assert resp.headers[REPLICA_HEADER] != killed
            continue
        assert resp.headers[MODEL_HEADER] == MODEL
        # a request tries fast and falls over, or skips it while the router holds it unhealthy
        tried = resp.headers.get(FALLBACK_HEADER) == FAST
        assert tried or "smollm2-fast: unhealthy" in resp.headers[REASON_HEADER]
        assert "[DONE]" in resp.text if stream else resp.json()["model"] == MODEL
    _wait_until_served_by(http, FAST, timeout_s=300)
    assert serve.status().applications[APP_NAME].status == "RUNNING"


def _wait_until_served_by(http: httpx.Client, model: str, timeout_s: float) -> None:
    """Leave the app as found: Serve restarts the replica, the router's probe sees it back."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = _post(http, GREEDY_SHORT, stream=False)
        if resp.headers.get(MODEL_HEADER) == model or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert resp.headers[MODEL_HEADER] == model, http.get("/health").json()
    assert http.get("/health").json()["down"] == {}


def test_the_routers_status_read_counts_what_serve_status_counts(serve_url: str) -> None:
    """The router reads deployment states from the controller's details dict, not through
    `serve.status()` (which pickles each request router class per call): the two agree on every
    application and deployment of the live instance, replica states counted alike."""
    ours = serve_status().applications
    theirs = serve.status().applications
    assert ours == theirs
    overview = ours[APP_NAME].deployments[model_deployment_name(MODEL)]
    assert overview.replica_states.get("RUNNING", 0) >= 1
