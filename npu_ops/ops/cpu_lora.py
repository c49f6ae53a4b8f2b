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
WIDENED_DTYPES = (torch.float16,)
"""Activations the kernel computes on in float32, returned in their own dtype (the reference's
rounding: float32 arithmetic, one cast at the end)."""


def runs_kernel(y: torch.dtype, x: torch.dtype, adapters: torch.dtype) -> bool:
    """Whether `grouped_lora` with these dtypes (`y`'s, `x`'s, `lora_a`'s and `lora_b`'s) runs
    the kernel, else the reference: what `LoraLinear` asks before relying on the kernel's batch
    invariance."""
    return y == x and y in KERNEL_DTYPES + WIDENED_DTYPES and adapters in KERNEL_DTYPES


def grouped_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    row_ids: torch.Tensor,
    col_ids: torch.Tensor,
    col_spans: torch.Tensor,
) -> torch.Tensor:
    """Shapes and semantics as `npu_ops.ops.lora.grouped_lora`, computed in float32 throughout
    (the reference rounds its GEMMs to the adapters' dtype); the kernel writes the result into
    `y` (when contiguous and of a dtype it reads) and returns it.

    Dtypes (`runs_kernel`): activations float32 or bfloat16 run the kernel as they are, float16
    in float32; adapters float32 or bfloat16, `lora_b` of `lora_a`'s dtype. Others run the
    reference.

    Raises:
        RuntimeError: the kernel cannot be compiled or loaded on this host, or the shapes
            disagree.
    """
    if lora_b.dtype != lora_a.dtype or not runs_kernel(y.dtype, x.dtype, lora_a.dtype):
        return lora.grouped_lora(y, x, lora_a, lora_b, row_ids, col_ids, col_spans)
    if not torch.compiler.is_compiling():
        load(GROUPED_LORA)
    out = y.float() if y.dtype in WIDENED_DTYPES else y.contiguous()
    torch.ops.ascend_router.grouped_lora(
        out,
        x.to(out.dtype).contiguous(),
        lora_a.contiguous(),
        lora_b.contiguous(),
        row_ids.long(),
        col_ids.long(),
        col_spans.long().contiguous(),
    )
    return out.to(y.dtype)
