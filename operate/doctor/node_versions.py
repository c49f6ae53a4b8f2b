"""What every node of a Ray cluster runs: Ray, Python, CANN, torch, torch_npu and its cards.

Ray refuses a node whose Ray or Python differs from the cluster's, and the ranks of one replica
placed on different nodes meet in one HCCL group and exchange pickled tensors, so CANN, torch and
torch_npu should agree as well. The doctor process sees only its own machine, so
`probe_node_versions` runs `local_versions` as a tiny Ray task pinned to each node
(`NodeAffinitySchedulingStrategy`, hard affinity, no CPU reserved, so that it runs beside
replicas that hold every CPU). Versions come from package metadata: nothing imports torch_npu,
which would fail on a node where CANN's `set_env.sh` was not sourced.
"""

from __future__ import annotations

import contextlib
import logging
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from configs import envs
from operate.doctor.checks_hardware import davinci_devices
from operate.doctor.install_files import DEFAULT_ROOT, TOOLKIT, read_cann_version

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeVersions:
    """What one node runs, as a process on that node sees it.

    Attributes:
        ray: `ray.__version__`.
        python: `major.minor.micro` (Ray compares all three by default).
        cann: the CANN toolkit version; None when no toolkit is found.
        torch: the installed torch distribution's version; None when not installed.
        torch_npu: the installed torch_npu distribution's version; None when not installed.
        cards: `/dev/davinciN` card device files on the node.
    """

    ray: str
    python: str
    cann: str | None
    torch: str | None
    torch_npu: str | None
    cards: int


NodeVersionsProbe = Callable[[Sequence[str]], dict[str, NodeVersions | str]]
"""Node ids → each node's versions, or why it gave none (`probe_node_versions` or a fake)."""


def _installed(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def local_versions(toolkit: Path | None = None, dev_dir: Path = Path("/dev")) -> NodeVersions:
    """The versions of this process's node: the body of the task each node runs.

    Args:
        toolkit: the CANN toolkit directory; default `ASCEND_TOOLKIT_HOME` (exported by
            `set_env.sh`), else `/usr/local/Ascend/ascend-toolkit/latest`.
        dev_dir: where the davinci device files live.
    """
    import ray

    if toolkit is None:
        home = envs.ascend_environment().get("ASCEND_TOOLKIT_HOME")
        toolkit = Path(home) if home else DEFAULT_ROOT / TOOLKIT
    cann = read_cann_version(toolkit)
    return NodeVersions(
        ray=ray.__version__,
        python=platform.python_version(),
        cann=cann.version if cann else None,
        torch=_installed("torch"),
        torch_npu=_installed("torch_npu", "torch-npu"),
        cards=len(davinci_devices(dev_dir)),
    )


def probe_node_versions(
    node_ids: Sequence[str], timeout_s: float = 60.0
) -> dict[str, NodeVersions | str]:
    """Run `local_versions` on every node of the Ray cluster this process is connected to.

    Args:
        node_ids: Ray node ids (hex), of alive nodes.
        timeout_s: how long to wait for all the answers.

    Returns:
        Node id → its versions, or why it gave none: the task failed (e.g. ascend-router is not
        importable in that node's Python) or did not answer within `timeout_s` (e.g. the node's
        workers cannot start).
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(local_versions)
    refs = {
        node_id: task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            name="ascend-router-doctor-versions",
        ).remote()
        for node_id in node_ids
    }
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    found: dict[str, NodeVersions | str] = {}
    for node_id, ref in refs.items():
        ready, _ = ray.wait([ref], timeout=0)
        if not ready:
            with contextlib.suppress(Exception):  # it may finish meanwhile; the answer is late
                ray.cancel(ref, force=True)
            found[node_id] = f"no answer within {timeout_s:.0f} s"
            continue
        try:
            found[node_id] = ray.get(ref)
        except Exception as exc:  # a node that cannot run the probe is a finding, not a crash
            logger.debug("version probe failed on node %s", node_id, exc_info=True)
            lines = [line for line in str(exc).splitlines() if line.strip()]
            found[node_id] = f"{type(exc).__name__}: {lines[-1].strip() if lines else ''}"
    return found
