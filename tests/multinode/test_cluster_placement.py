"""Deployments pinned to simulated nodes by custom resources, and tensor parallel across two
nodes equal to one rank."""

from __future__ import annotations

import httpx
from cluster_state import node_ips, rank_nodes, replica_nodes
from simulated_cluster import SimulatedCluster

from router.app import model_deployment_name

PROMPTS = ["Name three colours.", "What is the capital of France?", "1, 2, 3, 4,"]


def test_each_model_replica_runs_on_the_node_it_is_pinned_to(cluster: SimulatedCluster) -> None:
    for model, node in (("smol-a", "node_a"), ("smol-b", "node_b")):
        assert replica_nodes(model_deployment_name(model)) == [cluster.nodes[node].node_id]
    assert set(node_ips().values()) == {"127.0.0.1"}  # the simulated nodes stay on loopback


def _answer(http: httpx.Client, model: str, prompt: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 24, "temperature": 0}  # fmt: skip
    resp = http.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-ascend-router-model"] == model
    return str(resp.json()["choices"][0]["message"]["content"])


def test_tensor_parallel_ranks_on_two_nodes_answer_as_one_rank(
    cluster: SimulatedCluster, http: httpx.Client
) -> None:
    (ranks,) = rank_nodes()  # tiny-tp's placement group: STRICT_SPREAD over two nodes
    assert len(set(ranks)) == 2 and set(ranks) <= set(node_ips())
    for prompt in PROMPTS:
        assert _answer(http, "tiny-tp", prompt) == _answer(http, "tiny-tp1", prompt)
