"""Live probes of the Python side: torch_npu and an already-running Ray cluster (its nodes).

Both are injectable into the doctor (`run.DoctorContext`) so tests need neither an NPU nor Ray.
`torch_npu` is imported only when it is installed. Ray is only *joined* when a cluster already
exists (`ray.is_initialized()` or `RAY_ADDRESS`); the doctor never starts one. Before joining,
the GCS at `RAY_ADDRESS` must accept a TCP connection within `REACH_TIMEOUT_S` (`ray.init` waits
on an address where nothing answers for a long time). `RAY_ADDRESS=local` (which asks
`ray.init` to start a new instance) counts as no cluster; `auto` is resolved the way `ray.init`
resolves it (the last `ray start` on this machine), which only ever finds a running cluster.
"""

from __future__ import annotations

import importlib.util
import logging
import socket
from dataclasses import dataclass

from operate.doctor.node_versions import NodeVersions, NodeVersionsProbe, probe_node_versions

logger = logging.getLogger(__name__)

REACH_TIMEOUT_S = 3.0
"""How long the GCS at `RAY_ADDRESS` has to accept a TCP connection before `ray.init`."""

DEFAULT_GCS_PORT = 6379
LOCAL = "local"
"""`RAY_ADDRESS` value that makes `ray.init` start a new local instance: no cluster to check."""


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
        ValueError: `address` is not `HOST:PORT`, `ray://HOST:PORT` or `auto`.
    """
    import ray

    joined = False
    if not ray.is_initialized():
        if not address or address == LOCAL:
            return None
        target = bootstrap_address(address)
        check_reachable(*gcs_endpoint(target))
        ray.init(address=target, logging_level=logging.WARNING, log_to_driver=False)
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


def bootstrap_address(address: str) -> str:
    """The address `ray.init` should join for `RAY_ADDRESS=address`: `auto` becomes the
    `HOST:PORT` of the last `ray start` on this machine (as `ray.init` resolves it); any other
    value is returned as given.

    Raises:
        ConnectionError: `auto` and no Ray cluster was started on this machine.
    """
    if address != "auto":
        return address
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address("auto")
    except Exception as exc:  # Ray raises ConnectionError (or others) when it finds nothing
        raise ConnectionError(f"no running Ray cluster found on this machine ({exc})") from None
    if not found:
        raise ConnectionError("no running Ray cluster found on this machine")
    return found


def gcs_endpoint(address: str) -> tuple[str, int]:
    """(host, port) of `HOST:PORT`, `HOST` (port 6379), `[IPv6]:PORT` or `ray://HOST:PORT`.

    Raises:
        ValueError: no host, or a port that is not a number in 1..65535.
    """
    rest = address.removeprefix("ray://")
    if rest.startswith("["):
        host, close, tail = rest[1:].partition("]")
        port = tail.removeprefix(":") if close and tail.startswith(":") else tail or ""
        ok = bool(close) and (not tail or tail.startswith(":"))
    elif rest.count(":") == 1:
        host, _, port = rest.partition(":")
        ok = True
    else:
        host, port, ok = rest, "", ":" not in rest
    port = port or str(DEFAULT_GCS_PORT)
    if not ok or not host or "/" in rest or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"RAY_ADDRESS {address!r} is not HOST:PORT (e.g. 10.0.0.1:6379)")
    return host, int(port)


def check_reachable(host: str, port: int, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Return when `host:port` accepts a TCP connection within `timeout_s`.

    Raises:
        ConnectionError: it does not (refused, unreachable, unknown host or timed out).
    """
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise ConnectionError(
            f"cannot reach the cluster at {host}:{port} within {timeout_s:g} s: {why}"
        ) from None
