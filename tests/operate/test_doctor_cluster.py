"""`ascend-router doctor` on a multi-node Ray cluster, seen through fake node probes (no Ray runs).

Nodes are `RayNode`s as `probes.probe_ray` builds them, with the versions a task pinned to each
node would report; `probe_ray` itself runs against a stubbed `ray.nodes()`.
"""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import pytest
import ray

from configs.model_config import ModelDeploymentConfig, RouterAppConfig
from configs.serve_file import load_app_config
from operate.doctor.checks_cluster import (
    check_cluster,
    check_cluster_npus,
    check_node_npus,
    check_versions,
)
from operate.doctor.checks_config import check_ray
from operate.doctor.node_versions import NodeVersions, local_versions
from operate.doctor.npu_smi import CommandResult
from operate.doctor.probes import (
    RayNode,
    TorchNpuProbe,
    check_reachable,
    gcs_endpoint,
    probe_ray,
)
from operate.doctor.report import Check, Status
from operate.doctor.run import DoctorContext, run_doctor

PROD = Path(__file__).resolve().parents[2] / "configs" / "prod.yaml"
HEALTHY = NodeVersions("2.60.0", "3.11.9", "8.3.RC1", "2.6.0", "2.6.0.post3", cards=8)


def node(ip: str, npus: float = 8.0, **versions: object) -> RayNode:
    """A probed node: healthy versions and as many cards as NPUs unless told otherwise."""
    found = dataclasses.replace(HEALTHY, **{"cards": int(npus), **versions})  # type: ignore[arg-type]
    return RayNode(ip, npus, f"id-{ip}", found)


def prod() -> RouterAppConfig:
    return load_app_config(PROD)


def with_model(config: RouterAppConfig, model_id: str, **updates: object) -> RouterAppConfig:
    """`config` with one model's fields (`engine`: a dict of engine fields) replaced."""

    def change(m: ModelDeploymentConfig) -> ModelDeploymentConfig:
        if m.model_id != model_id:
            return m
        engine = m.engine.model_copy(update=updates.pop("engine", {}))  # type: ignore[arg-type]
        return m.model_copy(update={"engine": engine, **updates})

    return config.model_copy(update={"models": [change(m) for m in config.models]})


def by_name(checks: Sequence[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_a_healthy_cluster_passes() -> None:
    cpu = node("10.0.0.4", 0.0, cann=None, torch_npu=None)
    nodes = [node("10.0.0.1"), node("10.0.0.2"), node("10.0.0.3"), node("10.0.0.5"), cpu]
    checks = check_cluster(nodes, prod())
    assert [c for c in checks if c.status is not Status.PASS] == []
    named = by_name(checks)
    assert named["node 10.0.0.1"].detail == "NPU=8 of 8 /dev/davinci* card(s)"
    assert named["node 10.0.0.4"].detail == "no cards and no NPU: a CPU node"
    assert "need 19-26 NPUs" in named["cluster NPUs"].detail
    assert "the cluster has 32 on 5 node(s)" in named["cluster NPUs"].detail
    # the CPU node has no CANN and no torch_npu: only nodes with cards are compared for those
    assert named["cluster versions"].detail == (
        "5 node(s): Ray 2.60.0, Python 3.11.9, torch 2.6.0, CANN 8.3.RC1, torch_npu 2.6.0.post3"
    )


@pytest.mark.parametrize(
    ("ray_node", "status", "text"),
    [
        (node("10.0.0.2", 0.0, cards=8), Status.FAIL, "card(s) but Ray advertises no NPU"),
        (node("10.0.0.2", 8.0, cards=4), Status.FAIL, "NPU=8 but the node has 4 /dev/davinci*"),
        (node("10.0.0.2", 4.0, cards=8), Status.PASS, "NPU=4 of 8 /dev/davinci* card(s) (ASCEND"),
        (
            RayNode("10.0.0.2", 8.0, "id", None, "ModuleNotFoundError: engine"),
            Status.WARN,
            "engine",
        ),
        (RayNode("10.0.0.2", 0.0), Status.WARN, "advertises no NPU while other nodes do"),
        (RayNode("10.0.0.2", 8.0), Status.PASS, "NPU=8"),
    ],
)
def test_each_node_npus_against_its_cards(ray_node: RayNode, status: Status, text: str) -> None:
    checks = by_name(check_node_npus([node("10.0.0.1"), ray_node]))
    check = checks["node 10.0.0.2"]
    assert check.status is status and text in check.detail
    assert bool(check.fix) == (status is not Status.PASS)
    assert checks["node 10.0.0.1"].status is Status.PASS


def test_replica_ranges() -> None:
    ranges = {m.model_id: m.deployment.replica_range() for m in prod().models}
    assert ranges == {
        "qwen2.5-7b-instruct": (1, 4),  # autoscaling_config
        "deepseek-v2-lite-chat": (1, 1),  # num_replicas
        "phi-3-mini-4k-instruct": (2, 2),
        "deepseek-v4-flash": (1, 1),
        "qwen2.5-32b-instruct": (1, 2),
    }


def test_cluster_npus_against_the_deployments_needs() -> None:
    config = prod()
    (short,) = check_cluster_npus([node("10.0.0.1", 4.0)], config)
    assert short.status is Status.FAIL and "need 19 NPUs at their minimum replicas" in short.detail
    assert "qwen2.5-7b-instruct 1-4 x 1, deepseek-v2-lite-chat 1 x 4" in short.detail
    assert "deepseek-v4-flash 1 x 8" in short.detail
    assert "qwen2.5-32b-instruct 1-2 x 4" in short.detail  # TP 2 x PP 2: 4 NPUs a replica
    (cpu,) = check_cluster_npus([node("10.0.0.1", 4.0)], config, has_npu=False)
    assert cpu.status is Status.WARN
    three = [node("10.0.0.1"), node("10.0.0.2"), node("10.0.0.3")]
    (peak,) = check_cluster_npus(three, config)
    assert peak.status is Status.WARN and "26 NPUs at the maximum replicas" in peak.detail
    assert "stay pending" in peak.detail and "max_replicas" in peak.fix

    # scale to zero: nothing needed at start, the maximum still counts
    autoscale = {"min_replicas": 0, "max_replicas": 4, "target_ongoing_requests": 32}
    deployment = config.models[0].deployment.model_copy(update={"autoscaling_config": autoscale})
    zero = with_model(config, "qwen2.5-7b-instruct", deployment=deployment)
    (ok,) = check_cluster_npus([*three, node("10.0.0.4")], zero)
    assert ok.status is Status.PASS and "need 18-26 NPUs" in ok.detail
    assert "qwen2.5-7b-instruct 0-4 x 1" in ok.detail


def test_placement_strategies_decide_what_must_share_a_node() -> None:
    nodes = [node("10.0.0.1", 2.0), node("10.0.0.2", 2.0), node("10.0.0.3", 8.0, cards=8)]
    small = nodes[:2]
    # without DeepSeek-V4-Flash, whose 8 ranks need a whole 8-card node under any strategy
    # here, and Qwen2.5-32B, whose TP 2 x PP 2 ranks need 4 on one node
    config = prod()
    wide = {"deepseek-v4-flash", "qwen2.5-32b-instruct"}
    config = config.model_copy(
        update={"models": [m for m in config.models if m.model_id not in wide]}
    )
    # STRICT_PACK (default): the 4 ranks of deepseek need one node with 4 NPUs
    assert check_ray(small, config).status is Status.FAIL
    spread = with_model(
        config, "deepseek-v2-lite-chat", engine={"tensor_parallel_placement": "SPREAD"}
    )
    assert check_ray(small, spread).status is Status.PASS
    strict = with_model(
        config, "deepseek-v2-lite-chat", engine={"tensor_parallel_placement": "STRICT_SPREAD"}
    )
    named = by_name(check_cluster_npus(nodes, strict))
    check = named["deepseek-v2-lite-chat: placement"]
    assert (
        check.status is Status.FAIL and "4 different nodes; 3 node(s) have an NPU" in check.detail
    )
    assert "deepseek-v2-lite-chat: placement" not in by_name(
        check_cluster_npus([*nodes, node("10.0.0.4")], strict)
    )


def test_versions_that_differ_across_nodes() -> None:
    nodes = [
        node("10.0.0.1"),
        node("10.0.0.2", python="3.11.4", cann="8.2.RC1"),
        node("10.0.0.3", torch_npu=None),
    ]
    named = by_name(check_versions(nodes))
    assert "cluster versions" not in named
    python = named["cluster versions: Python"]
    assert python.status is Status.FAIL
    assert python.detail.startswith("3.11.9 on 10.0.0.1, 10.0.0.3; 3.11.4 on 10.0.0.2")
    assert "Ray requires one" in python.detail and "Python" in python.fix
    assert named["cluster versions: CANN"].status is Status.WARN
    torch_npu = named["cluster versions: torch_npu"]
    assert torch_npu.status is Status.WARN and "not installed on 10.0.0.3" in torch_npu.detail
    assert "cluster versions: Ray" not in named and "cluster versions: torch" not in named
    assert check_versions([RayNode("10.0.0.1", 8.0)]) == []


def _cluster_host(tmp_path: Path, nodes: list[RayNode] | None) -> DoctorContext:
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    return DoctorContext(
        runner=lambda argv: CommandResult(127, "", "npu-smi: command not found"),
        ascend_root=tmp_path / "nothing",
        dev_dir=dev,
        env={},
        ray_address="10.0.0.1:6379",
        torch_npu=lambda: TorchNpuProbe(installed=False),
        ray=lambda address: nodes,
        python=(3, 11),
        torch_version="2.6.0+cpu",
        cuda_available=lambda: False,
    )


def test_run_doctor_reports_the_cluster_after_ray(tmp_path: Path) -> None:
    nodes = [node("10.0.0.1"), node("10.0.0.2", 0.0, cards=8, ray="2.59.0")]
    names = [c.name for c in run_doctor(_cluster_host(tmp_path, nodes), prod())]
    at = names.index("ray")
    assert names[at : at + 5] == [
        "ray",
        "node 10.0.0.1",
        "node 10.0.0.2",
        "cluster NPUs",
        "cluster versions: Ray",
    ]
    # no cluster: no cluster lines
    names = [c.name for c in run_doctor(_cluster_host(tmp_path, None), prod())]
    assert "ray" in names and not any(n.startswith(("node ", "cluster ")) for n in names)


def test_probe_ray_asks_every_alive_node(monkeypatch: pytest.MonkeyPatch) -> None:
    def listed_node(node_id: str, alive: bool, ip: str, **resources: float) -> dict[str, object]:
        return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": ip, "Resources": resources}

    listed = [
        listed_node("a1", True, "10.0.0.1", NPU=8.0, CPU=192.0),
        listed_node("b2", False, "10.0.0.2"),
        listed_node("c3", True, "10.0.0.3", CPU=4.0),
    ]
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "nodes", lambda: listed)
    asked: list[list[str]] = []

    def versions(node_ids: Sequence[str]) -> dict[str, NodeVersions | str]:
        asked.append(list(node_ids))
        return {"a1": HEALTHY, "c3": "no answer within 60 s"}

    nodes = probe_ray(None, versions)
    assert asked == [["a1", "c3"]]
    assert nodes == [
        RayNode("10.0.0.1", 8.0, "a1", HEALTHY, ""),
        RayNode("10.0.0.3", 0.0, "c3", None, "no answer within 60 s"),
    ]


def test_local_versions_reads_this_node(tmp_path: Path) -> None:
    toolkit = tmp_path / "ascend-toolkit" / "latest"
    toolkit.mkdir(parents=True)
    (toolkit / "version.cfg").write_text("toolkit_running_version=[7.5.0.1.129:8.3.RC1]\n")
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("davinci0", "davinci1", "davinci_manager"):
        (dev / name).touch()
    found = local_versions(toolkit, dev)
    assert found.cann == "8.3.RC1" and found.cards == 2
    assert (found.ray, found.python) == (ray.__version__, platform.python_version())
    assert found.torch == metadata.version("torch")
    empty = local_versions(tmp_path / "none", tmp_path / "none")
    assert empty.cann is None and empty.cards == 0


def _refuse_ray_init(**kwargs: object) -> None:
    raise AssertionError(f"ray.init must not run: {kwargs}")


def test_probe_ray_does_not_wait_on_an_address_where_nothing_listens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", _refuse_ray_init)
    with pytest.raises(ConnectionError, match=f"cannot reach the cluster at 127.0.0.1:{port}"):
        probe_ray(f"127.0.0.1:{port}")


def test_probe_ray_never_starts_ray_for_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", _refuse_ray_init)
    assert probe_ray("local") is None
    assert probe_ray(None) is None


def test_run_doctor_skips_ray_address_local(tmp_path: Path) -> None:
    def must_not_probe(address: str | None) -> None:
        raise AssertionError("RAY_ADDRESS=local must not be probed")

    ctx = dataclasses.replace(
        _cluster_host(tmp_path, None), ray=must_not_probe, ray_address="local"
    )
    (check,) = [c for c in run_doctor(ctx) if c.name == "ray"]
    assert check.status is Status.SKIP and "RAY_ADDRESS=local" in check.detail


def test_gcs_endpoint_and_reachability() -> None:
    assert gcs_endpoint("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert gcs_endpoint("head") == ("head", 6379)
    assert gcs_endpoint("ray://head:10001") == ("head", 10001)
    assert gcs_endpoint("[fe80::1]:6380") == ("fe80::1", 6380)
    for bad in ("http://head:8265", "head:port", ":6379", "fe80::1", "head:70000"):
        with pytest.raises(ValueError, match="is not HOST:PORT"):
            gcs_endpoint(bad)
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_reachable("127.0.0.1", server.getsockname()[1], timeout_s=2)
