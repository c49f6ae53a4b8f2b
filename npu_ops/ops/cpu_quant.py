"""The `cpu` implementations of `fp8_block_matmul`, `mxfp4_matmul` and `mxfp4_grouped_matmul`
(per expert): the weight is dequantised by our table-lookup kernel
(`npu_ops/cpu_kernels/block_dequantize.cpp`) a band of output rows at a time, each band straight
into the activations' dtype, and multiplied while it is in cache.

The references (`npu_ops.ops.quant`) cast the whole weight with torch's float8 -> float32 cast,
which on CPU runs ~140 ms per 16M values (a 4096 x 4096 layer: 135 ms per token against 4.5 ms
for a float32 GEMM, one thread). The kernel reads each one-byte code (or e2m1 pair) through a
256-entry table built with torch's own casts, times its tile's float32 scale, so the dequantised
band is bit-equal to the reference's rows; the temporary is one band (`BAND_BYTES`), not the whole
layer (measured figures: docs/quantization.md).
"""

from __future__ import annotations

import torch

from npu_ops.cpu_kernels import BLOCK_DEQUANTIZE, load
from npu_ops.ops.quant import (
    FP8_CODE_DTYPE,
    MXFP4_BLOCK,
    check_fp8_block,
    check_mxfp4,
    fp4_byte_table,
    per_expert_rows,
)

BAND_BYTES = 4 << 20
"""Dequantised bytes per band of output rows (float32): small enough to stay in a core's L2/L3
while its GEMM reads it, large enough that the per-band GEMM is efficient."""


FP8_TABLE = torch.arange(256, dtype=torch.uint8).view(FP8_CODE_DTYPE).float().unsqueeze(1)
"""float32 `[256, 1]`: each e4m3 code's value, from torch's cast (the kernel's FP8 table)."""
FP4_TABLE = fp4_byte_table()
"""float32 `[256, 2]`: the two e2m1 values of each byte (the kernel's MXFP4 table)."""


def dequantize_into(
    out: torch.Tensor,
    codes: torch.Tensor,
    table: torch.Tensor,
    scale: torch.Tensor,
    block: tuple[int, int],
    start: int = 0,
) -> torch.Tensor:
    """Rows `[start, start + R)` of a block-scaled weight, written into `out` (the kernel's
    contract).

    Args:
        out: contiguous `[R, K]` float32, bfloat16 or float16 (written).
        codes: contiguous uint8 `[N, C]` one-byte codes.
        table: float32 `[256, P]`: the P values one byte holds (K = C * P).
        scale: contiguous float32 `[ceil(N / bn), ceil(K / bk)]`.
        block: `(bn, bk)`.
        start: the first row.

    Returns:
        `out`, equal to the float32 dequantisation of those rows cast to `out.dtype`.

    Raises:
        RuntimeError: shapes that disagree, or the kernel cannot be built here.
    """
    if not torch.compiler.is_compiling():  # loaded by an eager call before any capture
        load(BLOCK_DEQUANTIZE)
    torch.ops.ascend_router.block_dequantize(codes, table, scale, block[0], block[1], start, out)
    return out


def _banded_linear(
    x: torch.Tensor,
    codes: torch.Tensor,
    table: torch.Tensor,
    scale: torch.Tensor,
    block: tuple[int, int],
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """`x @ W.T (+ bias)` with `W` dequantised in bands of whole tile rows into one buffer."""
    n, k = codes.shape[0], codes.shape[1] * table.shape[1]
    codes = codes.contiguous().view(torch.uint8)
    scale = scale.float().contiguous()
    bias = None if bias is None else bias.to(x.dtype)
    band = min(n, max(block[0], BAND_BYTES // (4 * k) // block[0] * block[0]))
    buffer = x.new_empty(band, k)
    if band == n:
        return torch.nn.functional.linear(
            x, dequantize_into(buffer, codes, table, scale, block), bias
        )
    out = x.new_empty(*x.shape[:-1], n)
    for start in range(0, n, band):
        rows = min(band, n - start)
        w = dequantize_into(buffer[:rows], codes, table, scale, block, start)
        b = None if bias is None else bias[start : start + rows]
        out[..., start : start + rows] = torch.nn.functional.linear(x, w, b)
    return out


def fp8_block_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale_inv: torch.Tensor,
    block_size: tuple[int, int],
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Shapes and semantics as `npu_ops.ops.quant.fp8_block_matmul`.

    Raises:
        ValueError: as `npu_ops.ops.quant.check_fp8_block`.
        RuntimeError: the kernel cannot be built here.
    """
    check_fp8_block(weight, weight_scale_inv, block_size)
    return _banded_linear(x, weight, FP8_TABLE, weight_scale_inv, block_size, bias)


def mxfp4_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Shapes and semantics as `npu_ops.ops.quant.mxfp4_matmul`.

    Raises:
        ValueError: as `npu_ops.ops.quant.check_mxfp4`.
        RuntimeError: the kernel cannot be built here.
    """
    check_mxfp4(weight, weight_scale)
    return _banded_linear(x, weight, FP4_TABLE, weight_scale, (1, MXFP4_BLOCK), bias)


def mxfp4_grouped_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    group_sizes: torch.Tensor,
) -> torch.Tensor:
    """Shapes and semantics as `npu_ops.ops.quant.mxfp4_grouped_matmul`, each expert's rows
    through `mxfp4_matmul` above.

    Raises:
        ValueError: as the reference.
        RuntimeError: the kernel cannot be built here.
    """
    return per_expert_rows(mxfp4_matmul, x, weight, weight_scale, group_sizes)
