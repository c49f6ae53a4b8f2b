"""Replica routing on real Ray Serve over HTTP: configs/replicas.yaml's model on 2 replicas with
`prefix_aware` routing keeps a growing conversation on one replica, whose prefix cache then
serves more of each turn (`cached_tokens`, and that replica's `vllm:prefix_cache_hits`); a
session key keeps unrelated requests on one replica; every response names its replica."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from app_args import REPO
from dashboards import Exposition, scrape_until
from serve_helpers import side_app

APP = "prefix-replicas"
REPLICA = "x-ascend-router-replica"
SYSTEM = " ".join(f"Rule {i}: answer in one short sentence about colour {i}." for i in range(40))
"""A long shared system prompt (several KV blocks)."""


@pytest.fixture(scope="module")
def replicas(serve_url: str) -> Iterator[httpx.Client]:
    """configs/replicas.yaml's application, its replicas a quarter CPU each, at `/prefix-replicas`."""
    cfg = yaml.safe_load((REPO / "configs" / "replicas.yaml").read_text())
    args: dict[str, Any] = cfg["applications"][0]["args"]
    (model,) = args["models"]
    assert model["routing"]["replica"] == "prefix_aware"
    assert model["deployment"]["num_replicas"] == 2
    model["deployment"]["ray_actor_options"] = {"num_cpus": 0.25}
    with side_app(serve_url, APP, [model], session_key=args["session_key"]) as client:
        yield client


def ask(client: httpx.Client, messages: list[dict[str, str]], **extra: Any) -> httpx.Response:
    body = {"model": "smollm2", "messages": messages, "max_tokens": 8, "temperature": 0}
    resp = client.post("/v1/chat/completions", json=body, **extra)
    assert resp.status_code == 200, resp.text
    return resp


def test_conversation_stays_on_one_replica_and_its_cache_grows(replicas: httpx.Client) -> None:
    messages = [{"role": "system", "content": SYSTEM}]
    served: list[str] = []
    cached: list[int] = []
    for turn in range(4):
        messages.append({"role": "user", "content": f"Turn {turn}: which colour comes next?"})
        resp = ask(replicas, messages)
        body = resp.json()
        served.append(resp.headers[REPLICA])
        cached.append(body["usage"]["prompt_tokens_details"]["cached_tokens"])
        messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
    assert len(set(served)) == 1, served
    assert cached[0] < cached[1] < cached[2] < cached[3], cached

    # that replica's prefix-cache hits (in blocks) are in /metrics, per replica
    (replica, *_) = served
    blocks = cached[-1] // 16 + cached[-2] // 16

    def hits_seen(e: Exposition) -> bool:
        labels = {"model_name": "smollm2", "replica": replica}
        return e.total("vllm:prefix_cache_hits_total", **labels) >= blocks

    scrape_until(replicas, "/metrics", hits_seen, f"{blocks} prefix-cache hits on {replica}")


def test_a_session_stays_on_its_replica(replicas: httpx.Client) -> None:
    placed: dict[str, set[str]] = {}
    for session in (f"session-{i}" for i in range(16)):
        for question in ("Name a fruit.", "Name a river."):
            resp = ask(
                replicas,
                [{"role": "user", "content": question}],
                headers={"x-session-id": session},
            )
            placed.setdefault(session, set()).add(resp.headers[REPLICA])
    assert all(len(r) == 1 for r in placed.values()), placed
    assert len(set.union(*placed.values())) == 2, placed  # the sessions spread over both
