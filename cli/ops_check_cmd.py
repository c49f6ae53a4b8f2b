"""`ascend-router ops-check`: run every registered op on this device and compare with references.

    ascend-router ops-check
    ascend-router ops-check --config configs/prod.yaml --model-id deepseek-v2-lite-chat
    ascend-router ops-check --all-impls

Prints `OP | IMPL | RESULT | MAX-ABS-ERR | ERROR`. Shapes default to Qwen2.5-7B attention/MLP
and DeepSeek-V3 routing; with `--config` they come from the model's checkpoint config (when it is
on this machine) or its `shape` section. Exit status 0 when every op is OK, 1 on any FAIL, 2 on
bad usage.

torch and the op modules are imported when the command runs, not when the CLI starts, so the
other sub-commands do not pay for them.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from npu_ops.ops.registry import Implementation, OpDef
    from npu_ops.platform import Platform
    from operate.ops_check.preflight import OpResult
    from operate.ops_check.shapes import OpShapes


def register(subparsers: Any) -> None:
    """Add the `ops-check` sub-command."""
    p = subparsers.add_parser(
        "ops-check",
        help="run every fused op on this device and compare it with its reference",
        description="Run every registered op with realistic shapes on the current device and "
        "compare each with its pure-torch reference.",
    )
    p.add_argument(
        "--config", metavar="CONFIG.yaml", help="take shapes from a model in this config"
    )
    p.add_argument("--model-id", help="model of --config to take shapes from (default: default)")
    p.add_argument(
        "--all-impls",
        action="store_true",
        help="check every implementation that can run here, not only the chosen one",
    )
    p.set_defaults(func=run)


def _shapes(args: argparse.Namespace, platform: Platform) -> OpShapes:
    import torch

    from configs.serve_file import load_app_config, pick_model
    from operate.ops_check.shapes import OpShapes
    from operate.planning.memory_plan import plan_dtype
    from operate.planning.model_facts import model_facts

    default_dtype = torch.float32 if platform.kind.value == "cpu" else torch.bfloat16
    if not args.config:
        if args.model_id:
            raise ValueError("--model-id needs --config")
        return OpShapes(dtype=default_dtype)
    model = pick_model(load_app_config(args.config), args.model_id)
    facts = model_facts(model)
    dtype = default_dtype if model.engine.dtype == "auto" else plan_dtype(model.engine.dtype)
    return OpShapes.for_model(
        dtype,
        num_kv_heads=facts.num_kv_heads,
        k_head_dim=facts.k_head_dim,
        v_head_dim=facts.v_head_dim,
        block_size=model.engine.block_size,
        hf_config=facts.hf_config,
    )


def _targets(platform: Platform, all_impls: bool) -> list[tuple[OpDef, list[Implementation]]]:
    from configs import envs
    from npu_ops.ops import REGISTRY

    kind = platform.kind.value
    if not all_impls:
        table = REGISTRY.select(kind, envs.op_impl_overrides())
        return [(op, [table.choices[op.name]]) for op in REGISTRY]
    return [
        (op, [i for i in op.implementations() if i.portable or kind in i.platforms])
        for op in REGISTRY
    ]


def _row(r: OpResult) -> list[str]:
    err = "-" if r.max_abs_err is None else f"{r.max_abs_err:.3g}"
    return [r.op, r.impl, "OK" if r.ok else "FAIL", err, r.error]


def run(args: argparse.Namespace) -> int:
    """Run the preflight and print its table; returns the exit status."""
    from npu_ops.platform import current_platform
    from operate.ops_check.preflight import run_preflight
    from operate.report_table import format_table

    platform = current_platform()
    try:
        shapes = _shapes(args, platform)
        targets = _targets(platform, args.all_impls)
    except ValueError as exc:
        print(f"ascend-router ops-check: error: {exc}", file=sys.stderr)
        return 2
    device = platform.device(0)
    dtype = str(shapes.dtype).removeprefix("torch.")
    print(
        f"device {device} ({platform.kind.value}), {dtype}; heads {shapes.num_heads} q / "
        f"{shapes.num_kv_heads} kv, head dims {shapes.k_head_dim}/{shapes.v_head_dim}; hidden "
        f"{shapes.hidden_size}, intermediate {shapes.intermediate_size}; experts "
        f"{shapes.num_experts} sigmoid (top {shapes.top_k}), {shapes.softmax_experts} softmax "
        f"(top {shapes.softmax_top_k})"
    )
    results = run_preflight(targets, shapes, device)
    headers = ["OP", "IMPL", "RESULT", "MAX-ABS-ERR", "ERROR"]
    print(format_table(headers, [_row(r) for r in results]))
    failed = [r for r in results if not r.ok]
    print(f"{len(results) - len(failed)} OK, {len(failed)} FAIL")
    return 1 if failed else 0
