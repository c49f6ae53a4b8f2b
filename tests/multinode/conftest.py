"""Fixtures of the multi-node tests (see simulated_cluster.py). Collected only in their own
pytest process, with `ASCEND_ROUTER_MULTINODE=1` (tests/test_multi_node.py starts it)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest
from simulated_cluster import (
    HEAD_SYSTEM_CONFIG,
    NODE_ARGS,
    PORT,
    SimulatedCluster,
    app_args,
    wait_serving,
)

if os.environ.get("ASCEND_ROUTER_MULTINODE") != "1":
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatedCluster]:
    """Head + node_a + node_b, with the application served and every model up."""
    assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0", "see the module docstring"
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from cli.tiny_models_cmd import make_tiny_models
    from router.app import APP_NAME, build_app

    (tiny,) = make_tiny_models(tmp_path_factory.mktemp("tiny"), ["qwen2"])

    sim = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "resources": {"head": 1},
            "include_dashboard": False,
            "_system_config": HEAD_SYSTEM_CONFIG,
            **NODE_ARGS,
        },
    )
    nodes = {}
    try:
        for name in ("node_a", "node_b"):
            nodes[name] = sim.add_node(num_cpus=2, resources={name: 1}, **NODE_ARGS)
        sim.wait_for_nodes()
        ray.init(address=sim.address, log_to_driver=False)
        # one HTTP proxy, on the head: with every node on 127.0.0.1, per-node proxies would share
        # the port, and a lost node would take the client connections its proxy held
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": PORT})
        serve.run(build_app(app_args(str(tiny))), name=APP_NAME, route_prefix="/")
        url = f"http://127.0.0.1:{PORT}"
        with httpx.Client(base_url=url, timeout=30) as client:
            wait_serving(client, ["smol-a", "smol-b", "tiny-tp1", "tiny-tp"])
        yield SimulatedCluster(sim, nodes, url)
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            sim.shutdown()


@pytest.fixture
def http(cluster: SimulatedCluster) -> Iterator[httpx.Client]:
    """A plain HTTP client on the application."""
    with httpx.Client(base_url=cluster.url, timeout=120) as client:
        yield client
