"""`ascend-router kuberay CONFIG.yaml [-o OUT]`: a KubeRay RayService manifest for a Serve config.

    ascend-router kuberay configs/prod.yaml -o configs/kuberay/prod-rayservice.yaml
    ascend-router kuberay configs/prod.yaml --image registry.example.com/ascend-router:0.1.0 \\
        --models-host-path /data/models | kubectl apply -f -

The manifest (`operate/kuberay/`) embeds the Serve config as `serveConfigV2`, runs a head pod and
a worker group of Ascend nodes (`huawei.com/Ascend910` cards declared to Ray as `NPU`), and mounts
the models volume in every pod. Without `-o` it goes to stdout. Exit status 0 on success, 2 on an
unreadable or invalid config or options that cannot work (a line on stderr says which and why).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from operate.kuberay.options import KubeRayOptions

# One source for the defaults: the options dataclass (its fields are the flags, same names).
_DEFAULTS = KubeRayOptions()


def register(subparsers: Any) -> None:
    """Add the `kuberay` sub-command."""
    p = subparsers.add_parser(
        "kuberay",
        help="write a KubeRay RayService manifest (Ascend NPU workers) for a Serve config",
        description="Write a KubeRay RayService (ray.io/v1) whose serveConfigV2 is the given "
        "Serve config, with a head pod and a worker group of Ascend NPU nodes.",
    )
    p.add_argument("config", metavar="CONFIG.yaml", help="Ray Serve YAML of the router")
    p.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    p.add_argument("--name", default=_DEFAULTS.name, help=f"RayService name ({_DEFAULTS.name})")
    p.add_argument(
        "--image",
        default=_DEFAULTS.image,
        help=f"image with CANN, torch_npu and ascend-router (default {_DEFAULTS.image}, built "
        "from this repository; push it to your registry)",
    )
    p.add_argument(
        "--ray-version",
        default=_DEFAULTS.ray_version,
        help=f"Ray version inside the image (default {_DEFAULTS.ray_version})",
    )
    p.add_argument(
        "--npus-per-worker",
        type=int,
        default=_DEFAULTS.npus_per_worker,
        help="Ascend cards per worker pod, declared to Ray as NPU (default "
        f"{_DEFAULTS.npus_per_worker}: a whole Atlas 800T A2 node)",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="worker pods at start and the autoscaler's floor (default: the fewest nodes that "
        "hold every deployment at its smallest replica count)",
    )
    p.add_argument(
        "--max-workers",
        type=int,
        help="the autoscaler's ceiling (default: the fewest nodes that hold every deployment at "
        "its largest replica count); autoscaling is on when it exceeds --workers",
    )
    for flag, what in (
        ("worker-cpus", "CPUs per worker pod"),
        ("worker-memory", "memory per worker pod"),
        ("head-cpus", "CPUs of the head pod"),
        ("head-memory", "memory of the head pod"),
    ):
        default = getattr(_DEFAULTS, flag.replace("-", "_"))
        p.add_argument(f"--{flag}", default=default, help=f"{what} (default {default})")
    p.add_argument(
        "--models-pvc",
        default=_DEFAULTS.models_pvc,
        help="PersistentVolumeClaim with the checkpoints, ReadOnlyMany or ReadWriteMany "
        f"(default {_DEFAULTS.models_pvc})",
    )
    p.add_argument(
        "--models-host-path",
        metavar="DIR",
        help="mount this directory of every node instead of the claim",
    )
    p.add_argument(
        "--models-mount",
        default=_DEFAULTS.models_mount,
        help="where the weights appear in the pods; config paths must lie under it (default "
        f"{_DEFAULTS.models_mount})",
    )
    p.add_argument(
        "--driver-mounts",
        action=argparse.BooleanOptionalAction,
        default=_DEFAULTS.driver_mounts,
        help="mount the Ascend driver, dcmi, npu-smi and ascend_install.info from the host "
        "(--no-driver-mounts where Ascend Docker Runtime mounts them)",
    )
    p.add_argument(
        "--cann-set-env",
        default=_DEFAULTS.cann_set_env,
        help=f"CANN environment script sourced before ray start on workers "
        f"(default {_DEFAULTS.cann_set_env})",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Generate the manifest; returns the exit status."""
    from operate.kuberay.render import generate
    from operate.systemd_units import write_text_file

    out = None if args.output is None else Path(args.output)
    try:
        fields = dataclasses.fields(KubeRayOptions)
        options = KubeRayOptions(**{f.name: getattr(args, f.name) for f in fields})
        generated = generate(args.config, options, args.output)
        if out is not None:
            write_text_file(out, generated.text)
    except ValueError as exc:
        print(f"ascend-router kuberay: error: {exc}", file=sys.stderr)
        return 2
    if out is None:
        sys.stdout.write(generated.text)
        return 0
    scaling = (
        f"{generated.workers}"
        if generated.workers == generated.max_workers
        else f"{generated.workers} (autoscaling to {generated.max_workers})"
    )
    print(
        f"wrote {out}: RayService {options.name}, worker pods {scaling} x "
        f"{options.npus_per_worker} NPUs, image {options.image}"
    )
    return 0
