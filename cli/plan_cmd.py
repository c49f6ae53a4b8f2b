"""`ascend-router plan CONFIG.yaml`: per-deployment memory plan on Ascend cards.

    ascend-router plan configs/prod.yaml
    ascend-router plan configs/prod.yaml --card 910B4

For each deployment: weights (total and per rank), KV bytes per token per rank, the KV budget
and blocks that fit at `gpu_memory_utilization`, and how many sequences fit at full context.
Formulas and the activation reserve are documented in `engine/planning/memory_plan.py`.
Exit status 0 when every deployment fits, 1 when one cannot (a line says which and why), 2 on
an unreadable or invalid config. Heavy imports happen when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.planning.memory_plan import DeploymentPlan


def register(subparsers: Any) -> None:
    """Add the `plan` sub-command."""
    p = subparsers.add_parser(
        "plan",
        help="plan weights, KV cache and concurrency of each deployment on Ascend cards",
        description="Print a per-deployment memory plan: weights, KV cache per token, KV blocks "
        "at gpu_memory_utilization, and sequences that fit at full context.",
    )
    p.add_argument("config", metavar="CONFIG.yaml", help="Ray Serve YAML of the router")
    p.add_argument(
        "--card",
        default="910B",
        help="Ascend card whose memory applies when a deployment has no device_memory_bytes: "
        "910B (default, 64 GiB), 910B1-910B3, 910B4 (32 GiB), 910A, 310P3",
    )
    p.set_defaults(func=run)


def _row(plan: DeploymentPlan) -> list[str]:
    from engine.planning.memory_plan import gib

    dtype = str(plan.dtype).removeprefix("torch.")
    return [
        plan.model_id,
        str(plan.tensor_parallel_size),
        dtype,
        gib(plan.weights_total),
        gib(plan.weights_per_rank),
        f"{plan.kv_bytes_per_token / 1024:.1f} KiB",
        gib(plan.kv_budget),
        f"{plan.num_blocks} x {plan.block_size}",
        f"{plan.max_seqs_full_context} @ {plan.max_model_len}",
        "yes" if plan.fits else "NO",
    ]


def run(args: argparse.Namespace) -> int:
    """Plan every deployment of the config; returns the exit status."""
    from configs.serve_file import load_app_config
    from engine.planning.memory_plan import ACTIVATION_RESERVE_BYTES, gib, plan_deployment
    from engine.planning.model_facts import model_facts
    from npu_ops.report_table import format_table

    try:
        config = load_app_config(args.config)
        plans = [plan_deployment(m, model_facts(m), args.card) for m in config.models]
    except ValueError as exc:
        print(f"ascend-router plan: error: {exc}", file=sys.stderr)
        return 2
    headers = [
        "MODEL",
        "TP",
        "DTYPE",
        "WEIGHTS",
        "WEIGHTS/RANK",
        "KV/TOKEN/RANK",
        "KV BUDGET/RANK",
        "KV BLOCKS/RANK",
        "SEQS @ FULL CONTEXT",
        "FITS",
    ]
    print(format_table(headers, [_row(p) for p in plans]))
    for plan in plans:
        print(
            f"{plan.model_id}: shapes from {plan.shape_source}; device memory "
            f"{gib(plan.device_memory)} ({plan.memory_source}) x {plan.utilization:g} - weights "
            f"{gib(plan.weights_per_rank)} - activation reserve {gib(ACTIVATION_RESERVE_BYTES)} "
            f"= KV {gib(plan.kv_budget)} per rank"
        )
    failing = [p for p in plans if not p.fits]
    for plan in failing:
        print(f"CANNOT FIT {plan.model_id}: {'; '.join(plan.problems)}")
    return 1 if failing else 0
