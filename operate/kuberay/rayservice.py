"""A KubeRay `RayService` manifest for the router's Serve config.

Format: the `RayService` custom resource, API `ray.io/v1`, of KubeRay v1.7.0 (CRD
`ray-operator/config/crd/bases/ray.io_rayservices.yaml`,
https://github.com/ray-project/kuberay/tree/v1.7.0; its v1 OpenAPI schema is test data in
`tests/data/kuberay_rayservice_v1.7.0.schema.json`). Every field written here also exists in
KubeRay v1.0's `ray.io/v1` (the prod manifest validated against v1.0.0's schema too).

What the manifest holds:
- `spec.serveConfigV2`: the Serve config itself (all of it: `proxy_location`, `http_options`,
  `applications`), dumped as YAML, so `yaml.safe_load` of it equals the input file's content and
  the two cannot drift.
- A head group (no NPU; `TORCH_DEVICE_BACKEND_AUTOLOAD=0`, see `HEAD_ENV`): `rayStartParams`
  `num-cpus: "0"` (KubeRay's `docs/guidance/rayStartParams.md`: keeps replicas off the head) and
  `dashboard-host: 0.0.0.0`; container ports `gcs-server`, `dashboard`, `client`, `metrics` and
  `serve` (KubeRay builds the Serve Service from the head container's port named `serve`; it is
  `http_options.port`).
- One worker group `npu`: each pod requests `npus_per_worker` cards of `huawei.com/Ascend910` and
  declares them to Ray as the custom resource `NPU` (`rayStartParams.resources`), which is what
  the config's replicas and tensor-parallel ranks ask for; plus the Ascend driver mounts and CANN
  environment of `ascend_pod`. Its size comes from `npu_plan`: the fewest workers that hold the
  deployments at their smallest replica counts, and Ray's in-tree autoscaler (KubeRay
  `enableInTreeAutoscaling`) adds workers up to what their largest counts need.
- The code: `import_path: router.app:build_app` is imported from the image (no `runtime_env`), so
  the image must contain this project.
- The models volume, mounted read-only at `models_mount` in head and workers: a
  PersistentVolumeClaim by default (shared storage reaches every node, including nodes the
  autoscaler adds), or a hostPath when the checkpoints are copied to every node.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from configs.model_config import RouterAppConfig
from configs.serve_file import APP_IMPORT_PATH, ConfigFileError, check_http_options
from operate.kuberay import ascend_pod
from operate.kuberay.npu_plan import NpuGroup, nodes_needed, npu_groups
from operate.kuberay.options import KubeRayOptions

HEAD_PORTS: tuple[tuple[str, int], ...] = (
    ("gcs-server", 6379),
    ("dashboard", 8265),
    ("client", 10001),
    ("metrics", 8080),
)
"""KubeRay's default head ports (`getDefaultPorts` in kuberay's
`ray-operator/controllers/ray/common/service.go`); the `serve` port comes from `http_options`."""

HEAD_ENV: tuple[tuple[str, str], ...] = (("TORCH_DEVICE_BACKEND_AUTOLOAD", "0"),)
"""Environment of the head container. The head runs the router (proxy and policy), which
imports torch; torch >= 2.5 imports every installed device backend on `import torch` (its
`torch.backends` entry points), and torch_npu's import needs CANN's libraries, which the head
(no NPU, no CANN `set_env.sh` sourced, no driver mounts) lacks. `TORCH_DEVICE_BACKEND_AUTOLOAD=0`
turns that autoload off (torch `torch/__init__.py` `_import_device_backends`); the NPU workers
keep it, and the engine imports torch_npu explicitly anyway."""

WORKER_GROUP = "npu"


def router_config(serve_doc: dict[str, Any]) -> RouterAppConfig:
    """The validated `args` of the ascend-router application in a Serve config mapping.

    Raises:
        ConfigFileError: no application has `import_path: router.app:build_app`.
        pydantic.ValidationError: the args fail validation (a `ValueError`).
    """
    for app in serve_doc["applications"]:
        if isinstance(app, dict) and app.get("import_path") == APP_IMPORT_PATH:
            return RouterAppConfig.model_validate(app.get("args"))
    raise ConfigFileError(f"no application with import_path {APP_IMPORT_PATH!r}")


def check_paths_on_volume(config: RouterAppConfig, mount: str) -> None:
    """Every checkpoint and LoRA path of the config lies under the models volume at `mount`.

    Package sources (`source.package`) ship inside the image and need no volume.

    Raises:
        ValueError: a path is relative or outside `mount` (names the model, the path, the fix).
    """
    root = Path(mount)
    for model in config.models:
        paths = [("source.path", model.source.path)]
        paths += [(f"LoRA adapter {name}", path) for name, path in model.adapters.items()]
        lora = model.engine.lora
        paths.append(("engine.lora.lora_root", lora.lora_root if lora else None))
        for what, path in paths:
            if path is not None and not Path(os.path.normpath(path)).is_relative_to(root):
                raise ValueError(
                    f"{model.model_id}: {what} {path!r} is not under {mount}, where the models "
                    f"volume is mounted in every pod; use an absolute path under {mount} or "
                    "pass --models-mount"
                )


def worker_counts(groups: list[NpuGroup], options: KubeRayOptions) -> tuple[int, int]:
    """(workers at start / autoscaler floor, autoscaler ceiling) for these NPU groups.

    Raises:
        ValueError: one replica needs more NPUs than a worker has, or `--workers` /
            `--max-workers` is below the workers the smallest replica counts need.
    """
    low = nodes_needed(groups, options.npus_per_worker, "min")
    high = nodes_needed(groups, options.npus_per_worker, "max")
    for flag, given in (("--workers", options.workers), ("--max-workers", options.max_workers)):
        if given is not None and given < low:
            raise ValueError(
                f"{flag} {given}: the deployments need {low} worker(s) of "
                f"{options.npus_per_worker} NPUs at their smallest replica counts; raise {flag} "
                "or --npus-per-worker, or lower the replica counts"
            )
    workers = options.workers if options.workers is not None else max(low, 1)
    ceiling = options.max_workers if options.max_workers is not None else max(high, workers)
    return workers, ceiling


def _models_volume(options: KubeRayOptions) -> dict[str, Any]:
    if options.models_host_path is not None:
        return {
            "name": "models",
            "hostPath": {"path": options.models_host_path, "type": "Directory"},
        }
    return {
        "name": "models",
        "persistentVolumeClaim": {"claimName": options.models_pvc, "readOnly": True},
    }


def _models_mount(options: KubeRayOptions) -> dict[str, Any]:
    return {"name": "models", "mountPath": options.models_mount, "readOnly": True}


def _resources(cpus: str, memory: str, npus: int = 0) -> dict[str, Any]:
    amounts: dict[str, Any] = {"cpu": cpus, "memory": memory}
    if npus:
        amounts[ascend_pod.NPU_RESOURCE] = npus
    return {"limits": amounts, "requests": dict(amounts)}


def head_group(options: KubeRayOptions, serve_port: int) -> dict[str, Any]:
    """`headGroupSpec`: Ray head without NPUs, taking no replicas (`num-cpus: "0"`)."""
    ports = [{"name": name, "containerPort": port} for name, port in HEAD_PORTS]
    ports.append({"name": "serve", "containerPort": serve_port})
    container = {
        "name": "ray-head",
        "image": options.image,
        "env": [{"name": name, "value": value} for name, value in HEAD_ENV],
        "resources": _resources(options.head_cpus, options.head_memory),
        "ports": ports,
        "volumeMounts": [ascend_pod.shm_mount(), _models_mount(options)],
    }
    return {
        "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
        "template": {
            "spec": {
                "containers": [container],
                "volumes": [ascend_pod.shm_volume(), _models_volume(options)],
            }
        },
    }


def worker_group(options: KubeRayOptions, workers: int, ceiling: int) -> dict[str, Any]:
    """`workerGroupSpecs[0]`: NPU workers with the Ascend devices, driver files and CANN env."""
    mounts = [ascend_pod.shm_mount(), _models_mount(options)]
    volumes = [ascend_pod.shm_volume(), _models_volume(options)]
    if options.driver_mounts:
        mounts += ascend_pod.driver_mounts()
        volumes += ascend_pod.driver_volumes()
    container = {
        "name": "ray-worker",
        "image": options.image,
        "args": ascend_pod.cann_args(options.cann_set_env),
        "resources": _resources(
            options.worker_cpus, options.worker_memory, options.npus_per_worker
        ),
        "volumeMounts": mounts,
    }
    return {
        "groupName": WORKER_GROUP,
        "replicas": workers,
        "minReplicas": workers,
        "maxReplicas": ceiling,
        "rayStartParams": {
            "resources": ascend_pod.ray_resources_param({"NPU": options.npus_per_worker})
        },
        "template": {"spec": {"containers": [container], "volumes": volumes}},
    }


def serve_config_yaml(serve_doc: dict[str, Any]) -> str:
    """The Serve config as the YAML text of `serveConfigV2` (key order kept)."""
    return yaml.safe_dump(serve_doc, sort_keys=False, default_flow_style=False, width=100)


def build_rayservice(serve_doc: dict[str, Any], options: KubeRayOptions) -> dict[str, Any]:
    """The `RayService` manifest (a mapping) serving `serve_doc` on Ascend workers.

    Args:
        serve_doc: a full Serve config (`load_serve_document`) with an ascend-router application.
        options: deployment choices (image, sizes, volumes).

    Raises:
        ValueError: the router config is invalid, a path is off the models volume, the proxies
            listen on loopback only, or a replica needs more NPUs than a worker has.
    """
    config = router_config(serve_doc)
    check_paths_on_volume(config, options.models_mount)
    serve_port = check_http_options(serve_doc)
    workers, ceiling = worker_counts(npu_groups(config), options)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": options.name,
            "labels": {"app.kubernetes.io/name": "ascend-router"},
        },
        "spec": {
            "serveConfigV2": serve_config_yaml(serve_doc),
            "rayClusterConfig": {
                "rayVersion": options.ray_version,
                "enableInTreeAutoscaling": ceiling > workers,
                "headGroupSpec": head_group(options, serve_port),
                "workerGroupSpecs": [worker_group(options, workers, ceiling)],
            },
        },
    }
