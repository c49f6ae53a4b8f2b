"""The manifest as a YAML file: a header saying how to regenerate it, then the `RayService`."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from configs.serve_file import load_serve_document
from operate.kuberay import ascend_pod
from operate.kuberay.npu_plan import npu_groups, replica_bounds
from operate.kuberay.options import KubeRayOptions
from operate.kuberay.rayservice import build_rayservice, router_config


class _ManifestDumper(yaml.SafeDumper):
    """Block style like `kubectl` output: nested lists indented, multi-line strings as `|`."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_ManifestDumper.add_representer(str, _represent_str)


@dataclass(frozen=True)
class Generated:
    """One generated manifest.

    Attributes:
        text: the YAML file, header included.
        manifest: the `RayService` mapping.
        workers: worker pods at start (the autoscaler's floor).
        max_workers: the autoscaler's ceiling (equal to `workers` when autoscaling is off).
    """

    text: str
    manifest: dict[str, Any]
    workers: int
    max_workers: int


def command_line(config: str, options: KubeRayOptions, output: str | None) -> str:
    """The `ascend-router kuberay` invocation that regenerates this manifest.

    Only the options that differ from their defaults appear, as their CLI flags.
    """
    argv = ["ascend-router", "kuberay", config]
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        if value == field.default:
            continue
        flag = "--" + field.name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else flag.replace("--", "--no-", 1))
        else:
            argv += [flag, str(value)]
    if output is not None:
        argv += ["-o", output]
    return shlex.join(argv)


def render_manifest(manifest: dict[str, Any], header: list[str]) -> str:
    """`header` as `#` comment lines, then `manifest` as block-style YAML."""
    body = yaml.dump(manifest, Dumper=_ManifestDumper, sort_keys=False, width=100)
    return "".join(f"# {line}".rstrip() + "\n" for line in header) + body


def _header(
    config: str,
    serve_doc: dict[str, Any],
    options: KubeRayOptions,
    output: str | None,
    workers: tuple[int, int],
) -> list[str]:
    router = router_config(serve_doc)
    low, high = workers
    scaling = f"{low}" if low == high else f"{low} to {high} (Ray autoscaler)"
    lines = [
        f"KubeRay RayService (ray.io/v1, schema of KubeRay v1.7.0) serving {config}.",
        "Generated; do not edit. Change the Serve config or the flags, then run:",
        f"  {command_line(config, options, output)}",
        f"Worker pods: {scaling}, each {options.npus_per_worker} x {ascend_pod.NPU_RESOURCE} "
        "declared to Ray as NPU.",
        "NPUs that share one node, per replica:",
    ]
    for group in npu_groups(router):
        model = next(m for m in router.models if m.model_id == group.model_id)
        first, last = replica_bounds(model)
        count = f"{first}" if first == last else f"{first}-{last}"
        spread = (
            f" (STRICT_SPREAD: on {group.distinct_nodes} nodes)" if group.distinct_nodes > 1 else ""
        )
        lines.append(f"  {group.model_id}: {group.npus:g} NPU(s) x {count} replica(s){spread}")
    if options.models_host_path is not None:
        weights = f"host directory {options.models_host_path}"
    else:
        weights = f"PersistentVolumeClaim {options.models_pvc}"
    lines.append(f"Weights: {weights}, read-only at {options.models_mount} in every pod.")
    return lines


def generate(config: str, options: KubeRayOptions, output: str | None = None) -> Generated:
    """Read the Serve config at path `config` and render its `RayService` file.

    Args:
        config: path of the Serve YAML, as it should appear in the header.
        options: deployment choices.
        output: where the file will be written (recorded in the regenerate command).

    Raises:
        ConfigFileError: the file is unreadable or not a Serve config with an ascend-router app.
        ValueError: the config or the options cannot give a working manifest (see
            `build_rayservice`).
    """
    serve_doc = load_serve_document(Path(config))
    try:
        manifest = build_rayservice(serve_doc, options)
    except ValueError as exc:
        raise ValueError(f"{config}: {exc}") from None
    group = manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    workers = (group["minReplicas"], group["maxReplicas"])
    text = render_manifest(manifest, _header(config, serve_doc, options, output, workers))
    return Generated(text, manifest, *workers)
