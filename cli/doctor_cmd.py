"""`ascend-router doctor [--config CONFIG.yaml]`: is this machine ready to serve on Ascend NPUs?

Prints `STATUS | CHECK | DETAIL | FIX`: platform, `npu-smi` (driver, firmware, per-card health and
HBM), device files, `ASCEND_RT_VISIBLE_DEVICES`, CANN and `set_env.sh`, torch ↔ torch_npu pairing,
`torch.npu`, Python, HCCL variables, Ray's NPU resources (only when a cluster already runs and
`RAY_ADDRESS` points at it: then also each node's NPUs against its cards, the config's NPUs across
the nodes, and one Ray, Python, CANN, torch and torch_npu on every node, from a task pinned to
each), and with `--config` each model's parallel sizes and memory against the devices. On a machine
without NPUs it says so and reports the CPU fallback. Exit status 1 when any check FAILs, 0
otherwise, 2 on an unreadable config. Heavy imports happen when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `doctor` sub-command."""
    p = subparsers.add_parser(
        "doctor",
        help="check drivers, CANN, torch_npu, devices and a config against this machine",
        description="Check that this machine can serve on Ascend NPUs, with a suggested fix "
        "for each problem.",
        epilog="Cluster checks (each node's NPUs and versions, the config's NPUs across nodes) "
        "run only against a running Ray cluster: set RAY_ADDRESS=HEAD_IP:6379 (or auto for the "
        "last `ray start` on this machine). The doctor never starts Ray; an address that does "
        "not accept a connection within a few seconds is reported, not waited on.",
    )
    p.add_argument("--config", metavar="CONFIG.yaml", help="also check this config's models")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run every check and print the report; returns the exit status."""
    from configs.serve_file import load_app_config
    from operate.doctor.report import exit_status
    from operate.doctor.run import DoctorContext, run_doctor
    from operate.report_table import format_table

    config = None
    if args.config:
        try:
            config = load_app_config(args.config)
        except ValueError as exc:
            print(f"ascend-router doctor: error: {exc}", file=sys.stderr)
            return 2
    checks = run_doctor(DoctorContext(), config)
    rows = [[c.status.value, c.name, c.detail, c.fix] for c in checks]
    print(format_table(["STATUS", "CHECK", "DETAIL", "FIX"], rows))
    counts = {
        s: sum(1 for c in checks if c.status.value == s) for s in ("FAIL", "WARN", "PASS", "SKIP")
    }
    print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return exit_status(checks)
