"""What a Ray container on an Ascend Kubernetes node needs: devices, driver files, CANN environment.

Sources:
- Devices: MindCluster's Ascend Device Plugin advertises each card as the extended resource
  `huawei.com/Ascend910` (910 and 910B series; `huawei.com/Ascend310P` for 310P) and a container
  asks for cards with equal `requests` and `limits` ("Preparation of Job YAML Files", MindCluster
  7.3.0, https://www.hiascend.com/document/detail/en/mindcluster/730/clustersched/schedulingug/mxdlug_scheduling_063.html;
  sample `samples/utils/env_validation/train-no-volcano.yaml` in
  https://gitcode.com/Ascend/mindcluster-deploy).
- Driver files: without Ascend Docker Runtime the device plugin mounts only the `/dev` nodes; the
  driver directories and files must be mounted by the pod, at the same path as on the host (same
  MindCluster page). The list is the one vLLM-Ascend's container instructions mount
  (https://github.com/vllm-project/vllm-ascend/blob/main/docs/source/installation.md):
  `/usr/local/dcmi`, `/usr/local/bin/npu-smi`, the driver under `/usr/local/Ascend/driver` (its
  `lib64/` and `version.info`; we mount the directory) and `/etc/ascend_install.info`. Nodes with
  Ascend Docker Runtime mount these themselves (`--no-driver-mounts`).
- CANN environment: CANN's `set_env.sh` (`/usr/local/Ascend/ascend-toolkit/set_env.sh`) sets
  `ASCEND_TOOLKIT_HOME`, `ASCEND_HOME_PATH`, `ASCEND_OPP_PATH`, `LD_LIBRARY_PATH` (toolkit and
  `driver/lib64/{common,driver}`), `PYTHONPATH` and `PATH`; Ascend's CANN images list the same
  variables (https://github.com/Ascend/cann-container-image, `cann/*/Dockerfile`). KubeRay runs
  the container's own `args` before its generated `ray start` in one `bash -lc` ("Specify
  container commands for Ray head/worker Pods",
  https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/pod-command.html; `BuildPod` in
  kuberay `ray-operator/controllers/ray/common/pod.go` v1.7.0: `<args> && ulimit ...; ray start`),
  so `source <set_env.sh>` as the args gives Ray and every replica it starts that environment,
  whatever the image's profile scripts do.
- `/dev/shm`: Ray's object store lives in shared memory; a memory-backed `emptyDir` there is what
  KubeRay's LLM samples (`ray-operator/config/samples/ray-service.high-throughput-gemma4.yaml`,
  v1.7.0) and vLLM-Ascend's LeaderWorkerSet example (`tests/e2e/nightly/multi_node` README) use
  (a container's default is 64 MiB).
"""

from __future__ import annotations

import shlex
from typing import Any

NPU_RESOURCE = "huawei.com/Ascend910"
"""Kubernetes extended resource of one Ascend 910/910B card (MindCluster Ascend Device Plugin)."""

DEFAULT_CANN_SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
"""CANN toolkit's environment script, as installed by the toolkit `.run` and in CANN images."""

DRIVER_HOST_PATHS: tuple[tuple[str, str, str], ...] = (
    ("ascend-driver", "/usr/local/Ascend/driver", "Directory"),
    ("ascend-dcmi", "/usr/local/dcmi", "Directory"),
    ("npu-smi", "/usr/local/bin/npu-smi", "File"),
    ("ascend-install-info", "/etc/ascend_install.info", "File"),
)
"""(volume name, host path = container path, hostPath type) of the driver files a pod mounts."""


def driver_volumes() -> list[dict[str, Any]]:
    """hostPath volumes of the Ascend driver files (`DRIVER_HOST_PATHS`)."""
    return [
        {"name": name, "hostPath": {"path": path, "type": kind}}
        for name, path, kind in DRIVER_HOST_PATHS
    ]


def driver_mounts() -> list[dict[str, Any]]:
    """Read-only mounts of `driver_volumes()` at the host's paths."""
    return [
        {"name": name, "mountPath": path, "readOnly": True} for name, path, _ in DRIVER_HOST_PATHS
    ]


def shm_volume() -> dict[str, Any]:
    """A memory-backed `emptyDir` for `/dev/shm` (Ray's object store)."""
    return {"name": "dshm", "emptyDir": {"medium": "Memory"}}


def shm_mount() -> dict[str, Any]:
    """The mount of `shm_volume()`."""
    return {"name": "dshm", "mountPath": "/dev/shm"}


def cann_args(set_env: str) -> list[str]:
    """Container `args` that KubeRay runs before `ray start`: source CANN's environment script.

    KubeRay pastes the args into a `bash -lc` command line, so the path is shell-quoted.
    """
    return [f"source {shlex.quote(set_env)}"]


def ray_resources_param(resources: dict[str, int]) -> str:
    """The `rayStartParams.resources` value declaring Ray custom resources, e.g. `NPU`.

    KubeRay passes the value verbatim as `ray start --resources=<value>` inside `bash -lc`, so it
    must be shell-quoted JSON. Written as KubeRay itself writes it (`'{"NPU":8}'`, single quotes:
    `addWellKnownAcceleratorResources` in `ray-operator/controllers/ray/common/pod.go` v1.7.0),
    which is also the form both readers of the value accept: KubeRay's `getResourcesMap` trims the
    quotes and parses JSON, and Ray's autoscaler (`_get_custom_resources` in
    `ray/autoscaler/_private/kuberay/autoscaling_config.py`) drops the outer pair and parses JSON
    with integer values. The samples' other spelling, `'"{\\"NPU\\": 8}"'`, works in the shell
    and the autoscaler, but KubeRay's own parser fails on it (it logs an error on every pod).
    """
    pairs = ",".join(f'"{name}":{count}' for name, count in resources.items())
    return "'{" + pairs + "}'"
