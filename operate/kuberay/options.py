"""The knobs of a generated `RayService` that the Serve config does not decide.

Defaults give each worker pod a whole Atlas 800T A2 node (its 8 Ascend 910B cards, with CPU and
memory requests that leave room for the node's own daemons) and use the image this project
builds; each one is a flag of `ascend-router kuberay`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

DEFAULT_IMAGE = "ascend-router:0.1.0"
"""The image built from this repository; no public registry has it, so push yours and pass
`--image`. It must hold CANN (toolkit + 910B kernels), a torch / torch_npu pair from Ascend's
compatibility table, and this project: e.g.
`FROM quay.io/ascend/cann:8.1.rc1-910b-ubuntu22.04-py3.10` (Ascend's CANN images,
https://github.com/Ascend/cann-container-image), then `TORCH_SPEC="torch==2.5.1 torch_npu==2.5.1"
bash setup.sh` on a copy of the repository (docs/install-npu.md)."""

DEFAULT_RAY_VERSION = "2.60.0"
"""`rayVersion`: must be the Ray inside the image (KubeRay gates features on it); the Ray that
`setup.sh` installed when this generator was written."""

DEFAULT_MODELS_PVC = "ascend-router-models"
"""PersistentVolumeClaim holding the checkpoints (created by the operator, ReadOnlyMany or
ReadWriteMany on shared storage such as NFS or CephFS, so that every pod, including those the
autoscaler adds on new nodes, reads the same files)."""

MAX_NAME_LENGTH = 47
"""Longest RayService name KubeRay v1.7.0 accepts (`MaxRayServiceNameLength`: 53 - 6)."""

MAX_NPUS_PER_WORKER = 4096
"""Bound of `--npus-per-worker` (a node has 8 or 16 cards; this only stops absurd values)."""

MAX_WORKERS = 10000
"""Bound of `--workers` and `--max-workers`."""

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# A PersistentVolumeClaim name: a DNS-1123 subdomain (at most 253 characters).
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
# Kubernetes resource.Quantity, as the CRD's `resources.limits` pattern spells it.
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


@dataclass(frozen=True)
class KubeRayOptions:
    """Deployment choices for the manifest; every field is a CLI flag of the same name.

    Attributes:
        name: RayService name (DNS-1035 label, at most 47 characters).
        image: container image of head and workers (`DEFAULT_IMAGE`).
        ray_version: Ray version inside the image (`DEFAULT_RAY_VERSION`).
        npus_per_worker: Ascend cards one worker pod requests, and the `NPU` resource it declares
            to Ray (8 on an Atlas 800T A2 node; a worker pod takes a whole node).
        workers: worker pods at start and the autoscaler's floor; None = the fewest nodes that
            hold every deployment at its smallest replica count (`npu_plan.nodes_needed`).
        max_workers: the autoscaler's ceiling; None = the fewest nodes that hold every deployment
            at its largest replica count. In-tree autoscaling is on when it exceeds `workers`.
        worker_cpus: CPU request and limit of a worker pod (a Kubernetes quantity).
        worker_memory: memory request and limit of a worker pod.
        head_cpus: CPU request and limit of the head pod; the head advertises 0 CPUs to Ray so no
            replica lands there.
        head_memory: memory request and limit of the head pod.
        models_pvc: claim mounted read-only at `models_mount` in every pod; ignored when
            `models_host_path` is set.
        models_host_path: a node directory mounted instead of the claim (checkpoints copied to
            every Ascend node beforehand, as `configs/prod.yaml` assumes on bare metal).
        models_mount: where the weights appear in the pods; every checkpoint and adapter path
            in the config must lie under it.
        driver_mounts: mount the Ascend driver files from the host (off on nodes whose Ascend
            Docker Runtime mounts them).
        cann_set_env: CANN environment script sourced before `ray start` on workers.
    """

    name: str = "ascend-router"
    image: str = DEFAULT_IMAGE
    ray_version: str = DEFAULT_RAY_VERSION
    npus_per_worker: int = 8
    workers: int | None = None
    max_workers: int | None = None
    worker_cpus: str = "64"
    worker_memory: str = "512Gi"
    head_cpus: str = "8"
    head_memory: str = "32Gi"
    models_pvc: str = DEFAULT_MODELS_PVC
    models_host_path: str | None = None
    models_mount: str = "/models"
    driver_mounts: bool = True
    cann_set_env: str = "/usr/local/Ascend/ascend-toolkit/set_env.sh"

    def __post_init__(self) -> None:
        if len(self.name) > MAX_NAME_LENGTH or not _DNS1035_LABEL.match(self.name):
            raise ValueError(
                f"--name {self.name!r}: a RayService name is a DNS-1035 label (lower-case "
                f"letters, digits and '-', starting with a letter) of at most {MAX_NAME_LENGTH} "
                "characters"
            )
        if not 1 <= self.npus_per_worker <= MAX_NPUS_PER_WORKER:
            raise ValueError(
                f"--npus-per-worker {self.npus_per_worker}: need 1..{MAX_NPUS_PER_WORKER}"
            )
        for flag, count in (("--workers", self.workers), ("--max-workers", self.max_workers)):
            if count is not None and not 1 <= count <= MAX_WORKERS:
                raise ValueError(f"{flag} {count}: need 1..{MAX_WORKERS}")
        if self.max_workers is not None and self.max_workers < (self.workers or 1):
            raise ValueError(
                f"--max-workers {self.max_workers} is below --workers {self.workers or 1}"
            )
        for flag, value in (
            ("--worker-cpus", self.worker_cpus),
            ("--worker-memory", self.worker_memory),
            ("--head-cpus", self.head_cpus),
            ("--head-memory", self.head_memory),
        ):
            if not _positive_quantity(value):
                raise ValueError(
                    f"{flag} {value!r}: not a positive Kubernetes quantity (e.g. 64, 512Gi)"
                )
        if not self.image or any(c.isspace() for c in self.image):
            raise ValueError(f"--image {self.image!r}: give an image reference without spaces")
        if len(self.models_pvc) > 253 or not _DNS1123_SUBDOMAIN.match(self.models_pvc):
            raise ValueError(
                f"--models-pvc {self.models_pvc!r}: a PersistentVolumeClaim name is a DNS-1123 "
                "subdomain (lower-case letters, digits, '-' and '.', at most 253 characters)"
            )
        for flag, path in (
            ("--models-mount", self.models_mount),
            ("--models-host-path", self.models_host_path),
            ("--cann-set-env", self.cann_set_env),
        ):
            if path is not None and not path.startswith("/"):
                raise ValueError(f"{flag} {path!r}: give an absolute path")


def _positive_quantity(value: str) -> bool:
    """`value` is a Kubernetes quantity above zero and within Kubernetes' range (< 2**63)."""
    match = _QUANTITY.match(value)
    if not match:
        return False
    number = Decimal(match.group(2))
    if match.group(1) == "-":
        number = -number
    exponent = match.group(8)  # the `e`/`E` form's suffix (`e3`, `E-3`), else None
    if exponent is not None:
        power = Decimal(exponent[1:])
        if abs(power) > 30 or power != power.to_integral_value():
            return False
        number = number.scaleb(int(power))
    return 0 < number < 2**63
