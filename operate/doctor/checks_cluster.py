"""Doctor checks of a multi-node Ray cluster, from `probes.probe_ray`'s view of every node.

- each node's `NPU` resource against the cards the node has (`/dev/davinciN`, seen by a task
  on that node);
- the NPUs the config's deployments need at their minimum and maximum replicas against the
  cluster's, and nodes enough for `STRICT_SPREAD` ranks;
- one Ray, Python, CANN, torch and torch_npu across the nodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from configs.model_config import RouterAppConfig
from operate.doctor.checks_config import replica_npus
from operate.doctor.probes import RayNode
from operate.doctor.report import Check, Status

START_NPUS = "ray start --resources='{\"NPU\": <cards>}'"
# (label, NodeVersions field, status on a mismatch, compared only on the nodes with cards)
_VERSION_FIELDS = (
    ("Ray", "ray", Status.FAIL, False),
    ("Python", "python", Status.FAIL, False),
    ("torch", "torch", Status.WARN, False),
    ("CANN", "cann", Status.WARN, True),
    ("torch_npu", "torch_npu", Status.WARN, True),
)
_WHY = {
    Status.FAIL: "Ray requires one across the cluster",
    Status.WARN: "ranks of one replica on different nodes share HCCL groups and tensors",
}


def _node_check(node: RayNode, others_have_npus: bool) -> Check:
    name, npus = f"node {node.node_ip}", node.npus
    if node.versions is None:
        if node.probe_error:
            return Check(
                name,
                Status.WARN,
                f"NPU={npus:g}; the node did not run the version probe: {node.probe_error}",
                "install ascend-router in the same Python environment on that node and check "
                "that Ray can start workers there (journalctl on the node, `ray status`)",
            )
        if npus == 0 and others_have_npus:
            return Check(
                name,
                Status.WARN,
                "advertises no NPU while other nodes do (fine for a head without cards)",
                f"{START_NPUS} on that node if it has cards",
            )
        return Check(name, Status.PASS, f"NPU={npus:g}")
    cards = node.versions.cards
    if cards and npus == 0:
        return Check(
            name,
            Status.FAIL,
            f"{cards} /dev/davinci* card(s) but Ray advertises no NPU: nothing is placed on them",
            f"restart Ray there with {START_NPUS} (`ascend-router systemd --npus {cards}`)",
        )
    if npus > cards:
        return Check(
            name,
            Status.FAIL,
            f"Ray advertises NPU={npus:g} but the node has {cards} /dev/davinci* card(s)",
            "advertise only the cards the node has; in a container pass every card "
            "(--device /dev/davinciN)",
        )
    if cards == 0:
        return Check(name, Status.PASS, "no cards and no NPU: a CPU node")
    kept = "" if npus == cards else " (ASCEND_RT_VISIBLE_DEVICES or --resources keep the rest)"
    return Check(name, Status.PASS, f"NPU={npus:g} of {cards} /dev/davinci* card(s){kept}")


def check_node_npus(nodes: Sequence[RayNode]) -> list[Check]:
    """One line per node: its `NPU` resource against the cards it has."""
    checks = []
    for node in nodes:
        others = any(n.npus > 0 for n in nodes if n is not node)
        checks.append(_node_check(node, others))
    return checks


def check_cluster_npus(
    nodes: Sequence[RayNode], config: RouterAppConfig, has_npu: bool = True
) -> list[Check]:
    """The NPUs every deployment needs at its minimum and maximum replicas against the cluster's
    total, and `STRICT_SPREAD` ranks against the nodes that have NPUs.

    On a cluster without NPUs a shortfall is a WARN (the CPU fallback serves), not a FAIL.
    """
    total = sum(n.npus for n in nodes)
    need = [(m, *m.deployment.replica_range(), replica_npus(m)) for m in config.models]
    low = sum(lo * per for _, lo, _, per in need)
    high = sum(hi * per for _, _, hi, per in need)
    parts = ", ".join(
        f"{m.model_id} {lo}{'' if lo == hi else f'-{hi}'} x {per:g}" for m, lo, hi, per in need
    )
    have = f"the cluster has {total:g} on {len(nodes)} node(s)"
    name, short = "cluster NPUs", Status.FAIL if has_npu else Status.WARN
    if total < low:
        checks = [
            Check(
                name,
                short,
                f"the deployments need {low:g} NPUs at their minimum replicas ({parts}); {have}",
                "add nodes (`ray start --address=HEAD:6379 --resources='{\"NPU\": 8}'`) or "
                "lower num_replicas / autoscaling_config.min_replicas",
            )
        ]
    elif total < high:
        checks = [
            Check(
                name,
                Status.WARN,
                f"{high:g} NPUs at the maximum replicas ({parts}); {have}: replicas past that "
                "stay pending until a node with free NPUs joins",
                "add nodes or lower autoscaling_config.max_replicas",
            )
        ]
    else:
        span = f"{low:g}" if low == high else f"{low:g}-{high:g}"
        checks = [Check(name, Status.PASS, f"the deployments need {span} NPUs ({parts}); {have}")]
    with_npus = sum(1 for n in nodes if n.npus >= 1)
    for m in config.models:
        tp = m.num_ranks
        if m.engine.tensor_parallel_placement == "STRICT_SPREAD" and tp > with_npus:
            checks.append(
                Check(
                    f"{m.model_id}: placement",
                    short,
                    f"STRICT_SPREAD puts its {tp} ranks on {tp} different nodes; "
                    f"{with_npus} node(s) have an NPU",
                    "add nodes or use tensor_parallel_placement SPREAD or STRICT_PACK",
                )
            )
    return checks


def _versions_by_value(nodes: Sequence[RayNode], field: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for n in nodes:
        found[getattr(n.versions, field) or "not installed"].append(n.node_ip)
    return dict(sorted(found.items(), key=lambda kv: -len(kv[1])))


def check_versions(nodes: Sequence[RayNode]) -> list[Check]:
    """Ray, Python, torch (every probed node), CANN and torch_npu (probed nodes with cards) are
    one version across the cluster: one PASS line, or one line per component that differs."""
    probed = [n for n in nodes if n.versions is not None]
    with_cards = [n for n in probed if n.npus > 0 or (n.versions and n.versions.cards)]
    checks, agreed = [], []
    for label, field, status, cards_only in _VERSION_FIELDS:
        found = _versions_by_value(with_cards if cards_only else probed, field)
        if len(found) == 1:
            agreed.append(f"{label} {next(iter(found))}")
        elif found:
            spread = "; ".join(f"{value} on {', '.join(ips)}" for value, ips in found.items())
            checks.append(
                Check(
                    f"cluster versions: {label}",
                    status,
                    f"{spread} ({_WHY[status]})",
                    f"install the same {label} on every node",
                )
            )
    if probed and not checks:
        summary = ", ".join(agreed)
        checks.append(Check("cluster versions", Status.PASS, f"{len(probed)} node(s): {summary}"))
    return checks


def check_cluster(
    nodes: Sequence[RayNode], config: RouterAppConfig | None, has_npu: bool = True
) -> list[Check]:
    """Every cluster check, in report order: nodes, the config's NPUs, versions."""
    checks = check_node_npus(nodes)
    if config is not None:
        checks += check_cluster_npus(nodes, config, has_npu)
    return checks + check_versions(nodes)
