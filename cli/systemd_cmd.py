"""`ascend-router systemd --role head|worker --config CONFIG.yaml`: systemd units for a node.

    ascend-router systemd --role head --config configs/prod.yaml --head-address 10.0.0.1:6379
    ascend-router systemd --role worker --config configs/prod.yaml --head-address 10.0.0.1:6379

The head gets `ascend-router-ray-head.service` (`ray start --head --block`) and
`ascend-router-serve.service` (a oneshot `serve deploy CONFIG` once the head is up); a worker gets
`ascend-router-ray-worker.service` (`ray start --block --address=...`). Each node advertises
`--npus` cards as Ray's `NPU` resource and makes them visible through
`ASCEND_RT_VISIBLE_DEVICES`. The units are described in `operate/systemd_units.py`. Exit status
0 when written, 2 on bad arguments or an unreadable or invalid config.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from operate.systemd_units import (
    DEFAULT_PORT,
    MAX_NPUS,
    SET_ENV,
    NodeUnits,
    parse_head_address,
)


def register(subparsers: Any) -> None:
    """Add the `systemd` sub-command."""
    p = subparsers.add_parser(
        "systemd",
        help="write systemd units that run Ray (head or worker) and serve deploy the config",
        description="Write the systemd units of one node of a Ray cluster serving the router: "
        "ray start --block as a service under CANN's environment, and on the head a oneshot "
        "serve deploy.",
    )
    p.add_argument("--role", choices=("head", "worker"), required=True, help="this node's role")
    p.add_argument(
        "--config", required=True, metavar="CONFIG.yaml", help="the Serve YAML the head deploys"
    )
    p.add_argument("-o", "--out-dir", default=".", help="where to write the units (default: .)")
    p.add_argument(
        "--head-address",
        metavar="HOST:PORT",
        help="the head's IP and GCS port: required on workers; on the head, its IP on the "
        "cluster network (ray start --node-ip-address) and --port",
    )
    p.add_argument(
        "--npus",
        type=int,
        help="NPUs this node gives Ray (default: as many as --visible-devices lists, else 8; "
        "0 for a node without cards)",
    )
    p.add_argument(
        "--visible-devices",
        metavar="IDS",
        help="ASCEND_RT_VISIBLE_DEVICES, e.g. 0,1,2,3 (default: 0..npus-1)",
    )
    p.add_argument(
        "--set-env",
        default=SET_ENV,
        help=f"CANN's set_env.sh, sourced before ray start (default {SET_ENV}; '' for none)",
    )
    p.add_argument(
        "--bin-dir",
        default=str(Path(sys.executable).parent),
        help="directory of the ray, serve and python to run (default: this Python's)",
    )
    p.add_argument(
        "--workdir", default=str(Path.cwd()), help="the services' working directory (default: .)"
    )
    p.add_argument("--user", help="run the services as this user (default: root)")
    p.set_defaults(func=run)


def _npus_and_devices(args: argparse.Namespace) -> tuple[int, tuple[int, ...]]:
    if args.npus is not None and not 0 <= args.npus <= MAX_NPUS:
        raise ValueError(f"--npus {args.npus}: need 0..{MAX_NPUS}")
    if args.visible_devices is None:
        npus = 8 if args.npus is None else args.npus
        return npus, tuple(range(max(npus, 0)))
    ids = [s.strip() for s in args.visible_devices.split(",") if s.strip()]
    if not all(s.isdigit() for s in ids):
        raise ValueError(f"--visible-devices {args.visible_devices!r} is not a list like 0,1,2,3")
    devices = tuple(int(s) for s in ids)
    return (len(devices) if args.npus is None else args.npus), devices


def run(args: argparse.Namespace) -> int:
    """Validate the config, write the node's units and say how to install them."""
    from configs.serve_file import check_http_options, load_app_config, load_serve_document
    from operate.systemd_units import write_units

    try:
        load_app_config(args.config)
        if args.role == "head":
            # `serve deploy` takes a full Serve config, and the proxies must listen beyond
            # loopback for clients on other machines (same check as `ascend-router kuberay`)
            check_http_options(load_serve_document(args.config))
        host, port = None, DEFAULT_PORT
        if args.head_address:
            host, port = parse_head_address(args.head_address)
        npus, devices = _npus_and_devices(args)
        node = NodeUnits(
            role=args.role,
            config=Path(args.config).resolve(),
            bin_dir=Path(args.bin_dir).resolve(),
            workdir=Path(args.workdir).resolve(),
            head_host=host,
            head_port=port,
            npus=npus,
            visible_devices=devices,
            set_env=args.set_env,
            user=args.user,
        )
        paths = write_units(node, Path(args.out_dir))
    except ValueError as exc:
        print(f"ascend-router systemd: error: {exc}", file=sys.stderr)
        return 2
    names = " ".join(p.name for p in paths)
    for path in paths:
        print(f"wrote {path}")
    print(
        "install on this node:\n"
        f"  sudo cp {' '.join(str(p) for p in paths)} /etc/systemd/system/\n"
        "  sudo systemctl daemon-reload\n"
        f"  sudo systemctl enable --now {names}\n"
        f"logs: journalctl -u {paths[0].name} -f"
    )
    return 0
