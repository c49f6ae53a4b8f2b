"""The op preflight: run each op's implementation on this device, compare with the reference.

For every op the chosen implementation (or, with `all_impls`, every implementation that can run
here) is called on realistic inputs (`operate.ops_check.samples`) on the current device; the
reference runs on host copies of the same inputs. Float outputs must agree within a tolerance for
their dtype (the FP8 / MXFP4 matmuls within a share of their largest output, for the activation
quantisation of their device kernels); integer outputs exactly (int8 quantised values within 1,
for rounding-mode differences). Routing outputs are compared per token as sets of (expert,
weight) pairs, since kernels may order equal-scoring experts differently, and the lightning
indexer's entries per query as sets (a kernel need not order near-equal scores as the reference
does). Any exception is a FAIL
carrying its message.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from npu_ops.ops.registry import Implementation, OpDef
from operate.ops_check.samples import OpCase, build_case
from operate.ops_check.shapes import OpShapes

logger = logging.getLogger(__name__)

# (rtol, atol) by output dtype; bfloat16 keeps 8 mantissa bits (~0.4 % per rounding).
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (2e-2, 2e-2),
}
ROUTING_OPS = ("moe_grouped_topk", "moe_topk_softmax")
SET_OPS = ("lightning_indexer",)
INT_SLACK = {"dynamic_quant": 1}
ACTIVATION_QUANT_SLACK = {
    "fp8_block_matmul": 0.05,
    "mxfp4_matmul": 0.05,
    "mxfp4_grouped_matmul": 0.05,
}
"""Ops whose device kernels also quantise the activations (Ascend 950's FP8 / MX matmuls, CUDA's
`scaled_mm`), which the weight-only reference does not: their outputs may differ by up to this
fraction of the largest reference output (`engine.quantization` tests bound it the same way)."""


@dataclass(frozen=True)
class OpResult:
    """Outcome of one implementation of one op.

    Attributes:
        op: op name.
        impl: implementation name.
        ok: matched the reference.
        max_abs_err: largest absolute difference from the reference (None if it did not run).
        error: why it failed; empty when ok.
    """

    op: str
    impl: str
    ok: bool
    max_abs_err: float | None
    error: str = ""


def _tensors(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _canonical_routing(out: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """(weights, ids) with each row sorted by expert id."""
    weights, ids = out[0], out[1]
    order = ids.long().argsort(dim=-1)
    return [weights.gather(1, order), ids.long().gather(1, order)]


def compare(op: str, got: Any, want: Any) -> tuple[bool, float, str]:
    """Compare an implementation's output with the reference's (both on the host).

    Returns:
        `(ok, max_abs_err, reason)`; reason is empty when ok.
    """
    g, w = _tensors(got), _tensors(want)
    if op in ROUTING_OPS:
        g, w = _canonical_routing(g), _canonical_routing(w)
    if op in SET_OPS:
        g, w = [t.sort(dim=-1).values for t in g], [t.sort(dim=-1).values for t in w]
    if len(g) != len(w):
        return False, float("nan"), f"{len(g)} outputs, reference has {len(w)}"
    worst, reasons = 0.0, []
    for i, (a, b) in enumerate(zip(g, w, strict=True)):
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            reasons.append(
                f"output {i}: {a.dtype}{list(a.shape)}, reference {b.dtype}{list(b.shape)}"
            )
            continue
        if a.numel() == 0:
            continue
        diff = (a.double() - b.double()).abs()
        err = float(diff.max())
        worst = max(worst, err)
        if a.dtype.is_floating_point:
            rtol, atol = TOLERANCES.get(a.dtype, TOLERANCES[torch.float32])
            if op in ACTIVATION_QUANT_SLACK:
                atol = max(atol, ACTIVATION_QUANT_SLACK[op] * float(b.double().abs().max()))
            bad = diff > atol + rtol * b.double().abs()
            if bool(bad.any()):
                reasons.append(
                    f"output {i}: {int(bad.sum())} values beyond rtol={rtol} atol={atol}"
                )
        elif err > INT_SLACK.get(op, 0):
            reasons.append(f"output {i}: integer values differ by up to {err:g}")
    return not reasons, worst, "; ".join(reasons)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def check_impl(
    opdef: OpDef, impl: Implementation, case: OpCase, device: torch.device, want: Any
) -> OpResult:
    """Run `impl` of `opdef` on `case` moved to `device`; compare with the reference's `want`."""
    try:
        got = impl.fn(*case.to(device).args)
        got = [t.cpu() for t in _tensors(got)]
    except Exception as exc:  # the preflight reports every failure instead of stopping
        logger.debug("ops-check %s/%s failed", opdef.name, impl.name, exc_info=True)
        return OpResult(opdef.name, impl.name, False, None, _first_line(exc))
    ok, err, reason = compare(opdef.name, got, want)
    return OpResult(opdef.name, impl.name, ok, err, reason)


def run_preflight(
    targets: Iterable[tuple[OpDef, Sequence[Implementation]]],
    shapes: OpShapes,
    device: torch.device,
) -> list[OpResult]:
    """Check every (op, implementations) pair; inputs and reference output are made once per op."""
    results = []
    for opdef, impls in targets:
        try:
            case = build_case(opdef.name, shapes)
            want = opdef.reference.fn(*case.args)
        except Exception as exc:  # a reference that cannot run on these shapes is a FAIL too
            logger.debug("ops-check reference %s failed", opdef.name, exc_info=True)
            results.append(OpResult(opdef.name, "reference", False, None, _first_line(exc)))
            continue
        for impl in impls:
            results.append(check_impl(opdef, impl, case, device, want))
    return results
