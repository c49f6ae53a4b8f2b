"""Doctor checks of a router config against this machine: parallel sizes, memory, Ray's NPUs."""

from __future__ import annotations

from collections.abc import Sequence

from configs.model_config import ModelDeploymentConfig, RouterAppConfig
from operate.doctor.probes import RayNode
from operate.doctor.report import Check, Status
from operate.planning.memory_plan import gib, plan_deployment
from operate.planning.model_facts import model_facts


def replica_npus(model: ModelDeploymentConfig) -> float:
    """NPUs one replica asks Ray for (`ray_actor_options.resources.NPU`), else its ranks
    (TP × PP)."""
    resources = model.deployment.ray_actor_options.get("resources") or {}
    return float(resources.get("NPU", model.num_ranks))


def one_node_npus(model: ModelDeploymentConfig) -> float:
    """NPUs of one replica that must sit on a single node.

    All of them for a single-rank replica or `STRICT_PACK` ranks (the default); with `PACK`,
    `SPREAD` or `STRICT_SPREAD` the ranks may sit on different nodes, so only the replica
    actor's own NPUs, or one rank's.
    """
    if model.num_ranks == 1 or model.engine.tensor_parallel_placement == "STRICT_PACK":
        return replica_npus(model)
    resources = model.deployment.ray_actor_options.get("resources") or {}
    return max(float(resources.get("NPU", 0)), 1.0)


def check_parallel(config: RouterAppConfig, devices: int, has_npu: bool) -> list[Check]:
    """Each model's ranks (TP × PP) against the visible devices; expert parallel sanity."""
    checks = []
    for m in config.models:
        tp, pp, name = (
            m.tensor_parallel_size,
            m.engine.pipeline_parallel_size,
            f"{m.model_id}: parallel",
        )
        ep = " with expert parallel" if m.expert_parallel else ""
        ep += f" x PP {pp}" if pp > 1 else ""
        if m.expert_parallel and tp == 1:
            checks.append(
                Check(
                    name,
                    Status.WARN,
                    "expert_parallel with tensor_parallel_size 1 splits nothing",
                    "set tensor_parallel_size > 1 or expert_parallel: false",
                )
            )
        elif not has_npu:
            checks.append(
                Check(
                    name,
                    Status.SKIP,
                    f"TP {tp}{ep}: no NPUs here; on CPU each rank is a host process (gloo)",
                )
            )
        elif m.num_ranks > devices:
            checks.append(
                Check(
                    name,
                    Status.FAIL,
                    f"TP {tp}{ep} needs {m.num_ranks} NPUs, {devices} visible",
                    "lower tensor_parallel_size or pipeline_parallel_size, or make more cards "
                    "visible (ASCEND_RT_VISIBLE_DEVICES)",
                )
            )
        else:
            checks.append(Check(name, Status.PASS, f"TP {tp}{ep} on {devices} visible NPU(s)"))
    return checks


def check_memory(
    config: RouterAppConfig, free_bytes: Sequence[int] | None, card: str = "910B"
) -> list[Check]:
    """Weights + activation reserve + one full-context sequence of KV, per rank, vs free memory.

    Args:
        config: the router config.
        free_bytes: free memory of each visible device; None when unknown (no NPU).
        card: card default for deployments without `device_memory_bytes`.
    """
    checks = []
    for m in config.models:
        name = f"{m.model_id}: memory"
        try:
            plan = plan_deployment(m, model_facts(m), card)
        except ValueError as exc:  # no checkpoint nor `shape` to plan from, or a bad setting
            unknown = "`shape` section" in str(exc)
            fix = "add a `shape` section" if unknown else "change what the message names"
            checks.append(Check(name, Status.FAIL, str(exc), fix))
            continue
        need = plan.min_free_per_rank()
        summary = (
            f"needs {gib(need)} per rank (weights {gib(plan.weights_per_rank)} + reserve + KV of "
            f"one {plan.max_model_len}-token sequence)"
        )
        if not plan.fits:
            checks.append(
                Check(name, Status.FAIL, "; ".join(plan.problems), "see `ascend-router plan`")
            )
        elif free_bytes is None:
            checks.append(Check(name, Status.SKIP, f"{summary}; no NPU memory to compare"))
        else:
            enough = sum(1 for f in free_bytes if f >= need)
            detail = f"{summary}; {enough} of {len(free_bytes)} card(s) have that free"
            if enough >= plan.tensor_parallel_size:
                checks.append(Check(name, Status.PASS, detail))
            else:
                checks.append(
                    Check(
                        name,
                        Status.FAIL,
                        detail,
                        "free the cards (`npu-smi info` lists their processes), lower "
                        "engine.max_model_len or raise tensor_parallel_size",
                    )
                )
    return checks


def check_ray(
    nodes: list[RayNode] | None, config: RouterAppConfig | None, has_npu: bool = True
) -> Check:
    """Ray's view of `NPU` resources per node, and whether what each replica must keep on one
    node (`one_node_npus`) fits on one.

    On a machine without NPUs a shortfall is a WARN (the CPU fallback serves), not a FAIL.
    """
    if nodes is None:
        return Check(
            "ray",
            Status.SKIP,
            "no Ray cluster in this process and RAY_ADDRESS unset (doctor never starts one)",
        )
    view = ", ".join(f"{n.node_ip}: NPU={n.npus:g}" for n in nodes) or "no alive nodes"
    largest = max((n.npus for n in nodes), default=0.0)
    if config is not None:
        short = [m for m in config.models if one_node_npus(m) > largest]
        if short:
            need = ", ".join(f"{m.model_id} needs {one_node_npus(m):g}" for m in short)
            return Check(
                "ray",
                Status.FAIL if has_npu else Status.WARN,
                f"{view}; per replica {need} NPUs on one node",
                "start Ray on Ascend nodes with NPU resources, e.g. "
                "`ray start --resources='{\"NPU\": 8}'`",
            )
    if largest == 0:
        return Check(
            "ray",
            Status.WARN,
            f"{view}: no node advertises NPU",
            "ray start --resources='{\"NPU\": <cards>}' on each Ascend node",
        )
    return Check("ray", Status.PASS, view)
