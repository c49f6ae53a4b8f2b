"""The `cpu` implementation of `grouped_lora`: our AVX512 kernel
(`npu_ops/cpu_kernels/grouped_lora.cpp`) in SGMV order. It computes each row's shrink against its
own adapter's rank columns only and each expand over its slice's output columns only, where the
reference's two dense GEMMs compute every adapter's columns for every row and multiply the zeros
of a merged projection's other slices; and one call replaces the reference's six ops (casts,
mask, two GEMMs). Each row's bits depend on its own input and adapter only (the kernel's header).
"""

from __future__ import annotations

import torch

from npu_ops.cpu_kernels import GROUPED_LORA, load
from npu_ops.ops import lora

KERNEL_DTYPES = (torch.float32, torch.bfloat16)
"""The activations' and the adapters' dtypes the kernel reads (each pair alike)."""


def grouped_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    row_ids: torch.Tensor,
    col_ids: torch.Tensor,
    col_spans: torch.Tensor,
) -> torch.Tensor:
    """Shapes and semantics as `npu_ops.ops.lora.grouped_lora`; the kernel writes the result into
    `y` (when contiguous) and returns it. `y` and `x` both float32 or both bfloat16, and `lora_a`
    and `lora_b` too, run the kernel; other dtypes run the reference.

    Raises:
        RuntimeError: the kernel cannot be compiled or loaded on this host, or the shapes
            disagree.
    """
    if (
        y.dtype not in KERNEL_DTYPES
        or x.dtype != y.dtype
        or lora_a.dtype not in KERNEL_DTYPES
        or lora_b.dtype != lora_a.dtype
    ):
        return lora.grouped_lora(y, x, lora_a, lora_b, row_ids, col_ids, col_spans)
    if not torch.compiler.is_compiling():
        load(GROUPED_LORA)
    y = y.contiguous()
    torch.ops.ascend_router.grouped_lora(
        y, x.contiguous(), lora_a, lora_b, row_ids, col_ids, col_spans
    )
    return y
