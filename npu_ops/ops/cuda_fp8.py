"""The `cuda` implementation of `fp8_block_matmul`: torch's blockwise-scaled FP8 GEMM.

torch 2.13's `torch.nn.functional.scaled_mm` (over `aten._scaled_mm_v2`) takes FP8 operands with
`ScalingType` recipes: `TensorWise`, `RowWise`, the DeepSeek recipes `BlockWise1x128` x
`BlockWise128x128` (and 1x128 x 1x128, 128x128 x 1x128) on SM90+, and the MX / NV FP4 recipes
(`BlockWise1x32` / `BlockWise1x16` with swizzled e8m0 / e4m3 scales, SM100+). The block-scaled FP8
checkpoint maps onto `BlockWise1x128` activations x `BlockWise128x128` weights, with the layouts
torch's meta checks (torch/_meta_registrations.py, `meta_scaled_mm_v2`) demand:

- `mat_b`: the `[N, K]` e4m3 weight as its transposed view `[K, N]` (column-major);
- `scale_a`: float32 `[M, K / 128]`, stride `[1, M]` (outer-dim-major);
- `scale_b`: float32 `[L4, N / 128]`, stride `[1, L4]`, with `L4 = round_up(K / 128, 4)`: the
  checkpoint's `weight_scale_inv` `[N / 128, K / 128]` padded with zeros to `L4` K blocks, then
  transposed.

Activations are quantised per token and 128 columns (`npu_ops.ops.quant.quantize_fp8_groups`), so
the product is W8A8, not the weight-only reference. Where the recipe does not apply (not a CUDA
tensor, a GPU below SM90, blocks other than 128 x 128, N or K not whole blocks, activations other
than bfloat16) the reference runs (`blockwise_unsupported` names why). MXFP4 weights have no
`cuda` implementation: torch's MX recipe needs SM100 and swizzled scales, and the reference runs.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.nn.functional import ScalingType

from npu_ops.ops import quant

BLOCK = 128
MIN_CAPABILITY = (9, 0)
"""SM90 (Hopper): the first GPUs with the 1x128 x 128x128 FP8 recipe."""


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    major, minor = torch.cuda.get_device_capability(index)
    return int(major), int(minor)


def blockwise_unsupported(
    device: torch.device,
    capability: tuple[int, int] | None,
    block_size: tuple[int, int],
    n: int,
    k: int,
    dtype: torch.dtype,
) -> str | None:
    """Why the blockwise recipe cannot run this product, or None when it can.

    Args:
        device: the activations' device.
        capability: the GPU's compute capability (None off CUDA).
        block_size: the weight's `(bn, bk)`.
        n, k: the weight's shape.
        dtype: the activations' dtype.
    """
    if device.type != "cuda" or capability is None:
        return f"not a CUDA tensor ({device})"
    if capability < MIN_CAPABILITY:
        return f"SM{capability[0]}{capability[1]} is below SM90"
    if block_size != (BLOCK, BLOCK):
        return f"weight blocks {list(block_size)} are not [128, 128]"
    if n % BLOCK or k % BLOCK:
        return f"weight {n}x{k} is not whole 128 x 128 blocks"
    if dtype != torch.bfloat16:
        return f"activations are {dtype}, not bfloat16"
    return None


def scaled_mm_args(
    x: torch.Tensor, weight: torch.Tensor, weight_scale_inv: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(mat_a, mat_b, scale_a, scale_b)` for `scaled_mm` in the layouts of the module doc.

    Args:
        x: `[M, K]` activations.
        weight: float8_e4m3fn `[N, K]`, whole 128 x 128 blocks.
        weight_scale_inv: `[N / 128, K / 128]` float32 or float8_e8m0fnu.
    """
    codes, scale = quant.quantize_fp8_groups(x, BLOCK)
    k_blocks = weight_scale_inv.shape[1]
    l4 = -(-k_blocks // 4) * 4
    padded = weight_scale_inv.new_zeros(weight_scale_inv.shape[0], l4, dtype=torch.float32)
    padded[:, :k_blocks] = weight_scale_inv.float()
    return codes, weight.t(), scale.t().contiguous().t(), padded.t()


def fp8_block_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale_inv: torch.Tensor,
    block_size: tuple[int, int],
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Shapes as `npu_ops.ops.quant.fp8_block_matmul`; the blockwise `scaled_mm` where it applies
    (module doc), else the reference.

    Raises:
        ValueError: as `npu_ops.ops.quant.check_fp8_block`.
    """
    quant.check_fp8_block(weight, weight_scale_inv, block_size)
    capability = _capability(x.device.index or 0) if x.device.type == "cuda" else None
    n, k = weight.shape
    if blockwise_unsupported(x.device, capability, block_size, n, k, x.dtype) is not None:
        return quant.fp8_block_matmul(x, weight, weight_scale_inv, block_size, bias)
    mat_a, mat_b, scale_a, scale_b = scaled_mm_args(x, weight, weight_scale_inv)
    out = F.scaled_mm(
        mat_a,
        mat_b,
        scale_a,
        ScalingType.BlockWise1x128,
        scale_b,
        ScalingType.BlockWise128x128,
        output_dtype=x.dtype,
    )
    return out if bias is None else out + bias.to(x.dtype)
