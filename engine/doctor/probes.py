"""Live probes of the Python side: torch_npu and an already-running Ray cluster (its nodes).

Both are injectable into the doctor (`run.DoctorContext`) so tests need neither an NPU nor Ray.
`torch_npu` is imported only when it is installed. Ray is only *joined* when a cluster already
exists (`ray.is_initialized()` or `RAY_ADDRESS`); the doctor never starts one.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass

from engine.doctor.node_versions import NodeVersions, NodeVersionsProbe, probe_node_versions

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TorchNpuProbe:
    """What torch_npu reports in this process.

    Attributes:
        installed: the `torch_npu` package is importable.
        version: its `__version__`.
        available: `torch.npu.is_available()`.
        device_count: `torch.npu.device_count()`.
        free_bytes: free memory of each visible device (`torch.npu.mem_get_info`).
        error: why importing or querying failed, empty if it did not.
    """

    installed: bool
    version: str | None = None
    available: bool = False
    device_count: int = 0
    free_bytes: tuple[int, ...] = ()
    error: str = ""


def probe_torch_npu() -> TorchNpuProbe:
    """Import torch_npu (if installed) and ask it about the devices."""
    if importlib.util.find_spec("torch_npu") is None:
        return TorchNpuProbe(installed=False)
    try:
        import torch
        import torch_npu

        npu = torch.npu  # type: ignore[attr-defined]  # registered by importing torch_npu
        version = str(getattr(torch_npu, "__version__", "unknown"))
        available = bool(npu.is_available())
        count = int(npu.device_count()) if available else 0
        free = tuple(int(npu.mem_get_info(i)[0]) for i in range(count))
    except Exception as exc:  # a broken install is a finding to report, not a crash
        logger.debug("torch_npu probe failed", exc_info=True)
        return TorchNpuProbe(installed=True, error=f"{type(exc).__name__}: {exc}")
    return TorchNpuProbe(True, version, available, count, free)


@dataclass(frozen=True)
class RayNode:
    """One alive Ray node, the NPU resource it advertises, and what it runs.

    Attributes:
        node_ip: the node's IP as Ray reports it.
        npus: its `NPU` resource.
        node_id: Ray's node id (hex).
        versions: what the node runs (`node_versions.probe_node_versions`); None when it was not
            probed or did not answer.
        probe_error: why `versions` is None when the probe ran; empty otherwise.
    """

    node_ip: str
    npus: float
    node_id: str = ""
    versions: NodeVersions | None = None
    probe_error: str = ""


def probe_ray(
    address: str | None, versions: NodeVersionsProbe = probe_node_versions
) -> list[RayNode] | None:
    """NPU resources and versions of every alive node of an existing Ray cluster.

    Args:
        address: `RAY_ADDRESS`; joined only when this process is not already connected.
        versions: asks each node what it runs (a Ray task pinned to it), while joined.

    Returns:
        The nodes, or None when no cluster is running in or known to this process.

    Raises:
        ConnectionError: `address` is set but no cluster answers there.
    """
    import ray

    joined = False
    if not ray.is_initialized():
        if not address:
            return None
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        joined = True
    try:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        found = versions([str(n["NodeID"]) for n in alive]) if alive else {}
        nodes = []
        for n in alive:
            answer = found.get(str(n["NodeID"]), "not probed")
            nodes.append(
                RayNode(
                    str(n.get("NodeManagerAddress", "?")),
                    float(n["Resources"].get("NPU", 0)),
                    str(n["NodeID"]),
                    answer if isinstance(answer, NodeVersions) else None,
                    answer if isinstance(answer, str) else "",
                )
            )
        return nodes
    finally:
        if joined:
            ray.shutdown()
