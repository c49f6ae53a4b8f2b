"""`ascend-router plan CONFIG.yaml`: per-deployment memory plan on Ascend cards.

    ascend-router plan configs/prod.yaml
    ascend-router plan configs/prod.yaml --card 910B4
    ascend-router plan configs/local.yaml --card cpu

For each deployment: weights (total and per rank), KV bytes per token per rank, the KV budget
and blocks that fit at `gpu_memory_utilization`, and how many sequences fit at once at full
context, at 128k and at 1M tokens (`-` past the deployment's `max_model_len`). A hybrid KV cache
(DeepSeek-V4) gets a line with its kinds and its sliding-window pool. Formulas and the
activation reserve are documented in `operate/planning/memory_plan.py`.
Exit status 0 when every deployment fits, 1 when one cannot (a line says which and why), 2 on
an unreadable or invalid config or a deployment that cannot be planned (named; the others are
still planned). Heavy imports happen when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from operate.planning.memory_plan import DeploymentPlan


def register(subparsers: Any) -> None:
    """Add the `plan` sub-command."""
    p = subparsers.add_parser(
        "plan",
        help="plan weights, KV cache and concurrency of each deployment on Ascend cards",
        description="Print a per-deployment memory plan: weights, KV cache per token, KV blocks "
        "at gpu_memory_utilization, and sequences that fit at full context, 128k and 1M tokens.",
    )
    p.add_argument("config", metavar="CONFIG.yaml", help="Ray Serve YAML of the router")
    p.add_argument(
        "--card",
        default="910B",
        help="Ascend card whose memory applies when a deployment has no device_memory_bytes: "
        "910B (default, 64 GiB), 910B1-910B3, 910B4 (32 GiB), 910A, 310P3; cpu plans a CPU "
        "replica, whose KV budget is engine.kv_cache_memory_bytes",
    )
    p.set_defaults(func=run)


def _context(tokens: int) -> str:
    """128k, 1M: a context length in the column headers."""
    return f"{tokens >> 20}M" if tokens % (1 << 20) == 0 else f"{tokens >> 10}K"


def _row(plan: DeploymentPlan) -> list[str]:
    from operate.planning.memory_plan import CONTEXTS, gib

    dtype = str(plan.dtype).removeprefix("torch.")
    blocks = f"{plan.num_blocks} x {plan.block_size}"
    if plan.hybrid:
        blocks += f" + {plan.sliding_blocks} sliding"
    per_token = plan.kv_bytes_per_token
    return [
        plan.model_id,
        f"{plan.tensor_parallel_size}"
        + (f" x {len(plan.pipeline_stage_layers)}" if plan.pipeline_stage_layers else ""),
        dtype,
        gib(plan.weights_total),
        gib(plan.weights_per_rank),
        f"{per_token / 1024:.1f} KiB ({per_token:,.0f} B)",
        gib(plan.kv_budget),
        blocks,
        f"{plan.max_seqs_full_context} @ {plan.max_model_len}",
        *(str(plan.seqs_at(n)) if n <= plan.max_model_len else "-" for n in CONTEXTS),
        "yes" if plan.fits else "NO",
    ]


def _hybrid_line(plan: DeploymentPlan) -> str:
    """The kinds of a hybrid cache and what one sequence holds of each pool."""
    from operate.planning.memory_plan import CONTEXTS, gib

    at = ", ".join(
        f"{_context(n)}: {plan.blocks_for(n)} + {plan.sliding_blocks_per_seq} blocks"
        for n in CONTEXTS
    )
    return (
        f"{plan.model_id}: KV cache {plan.kv_geometry}; {plan.kv_bytes_per_block} B per block "
        f"of the growing kinds, sliding-window pool {plan.sliding_blocks} blocks x "
        f"{plan.sliding_bytes_per_block} B = {gib(plan.sliding_pool_bytes)} per rank; a sequence "
        f"holds ceil(tokens / {plan.block_size}) growing + {plan.sliding_blocks_per_seq} sliding "
        f"blocks ({at})"
    )


def run(args: argparse.Namespace) -> int:
    """Plan every deployment of the config; returns the exit status."""
    from configs.serve_file import load_app_config
    from operate.planning.memory_plan import CONTEXTS, plan_deployment
    from operate.planning.model_facts import model_facts
    from operate.report_table import format_table

    try:
        config = load_app_config(args.config)
    except ValueError as exc:
        print(f"ascend-router plan: error: {exc}", file=sys.stderr)
        return 2
    plans, errors = [], []
    for m in config.models:
        try:
            plans.append(plan_deployment(m, model_facts(m), args.card))
        except ValueError as exc:  # the other models are still planned
            errors.append(f"ascend-router plan: error: {m.model_id}: {exc}")
    headers = [
        "MODEL",
        "TP x PP",
        "DTYPE",
        "WEIGHTS",
        "WEIGHTS/RANK",
        "KV/TOKEN/RANK",
        "KV BUDGET/RANK",
        "KV BLOCKS/RANK",
        "SEQS @ FULL CONTEXT",
        *(f"SEQS @ {_context(n)}" for n in CONTEXTS),
        "FITS",
    ]
    print(format_table(headers, [_row(p) for p in plans]))
    for plan in plans:
        print(f"{plan.model_id}: shapes from {plan.shape_source}; {plan.budget_derivation()}")
        if plan.hybrid:
            print(_hybrid_line(plan))
    failing = [p for p in plans if not p.fits]
    for plan in failing:
        print(f"CANNOT FIT {plan.model_id}: {'; '.join(plan.problems)}")
    for error in errors:
        print(error, file=sys.stderr)
    return 2 if errors else 1 if failing else 0
