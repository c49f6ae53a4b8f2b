"""Weight-only linears over the codes of a block-scaled FP8 or MXFP4 checkpoint.

The codes and scales stay resident as the checkpoint stores them (FP8 e4m3 one byte per weight
plus one scale per `[block_n, block_k]` tile; MXFP4 half a byte per weight plus one UE8M0 byte
per 32), and each forward computes through the op registry: `fp8_block_matmul` /
`mxfp4_matmul`, whose references dequantise the tiles into the activations' dtype inside the
GEMM (`npu_ops.ops.quant`). Activations are not quantised: the checkpoints' `activation_scheme:
dynamic` is a kernel choice of the FP8 GPUs (transformers' `fp8_linear`), not a property of the
weights, and the weight-only product is what the dequantised model computes.

Tensor parallel does not shard these modules (`engine.quantization.fp8_loader` refuses a
tensor-parallel FP8 replica).
"""

from __future__ import annotations

import torch
from torch import nn

from npu_ops.ops import OpTable, active_ops


def _frozen(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)


_STORAGE = {1: torch.uint8, 4: torch.int32}
"""Integer container per element size: codes and scales are held as integer views, so that a
`model.to(dtype)` (which casts every floating-point parameter, float8 included) leaves them."""


class Packed(nn.Module):
    """A tensor held as an integer view of its bytes, with its real dtype (see `_STORAGE`).

    Args:
        tensor: FP8 / FP4 codes, UE8M0 or float32 scales (any shape).
    """

    def __init__(self, tensor: torch.Tensor) -> None:
        super().__init__()
        self.dtype = tensor.dtype
        self.data = _frozen(tensor.contiguous().view(_STORAGE[tensor.element_size()]))

    def get(self) -> torch.Tensor:
        """The tensor in its real dtype (a view, no copy)."""
        return self.data.view(self.dtype)

    def extra_repr(self) -> str:
        return f"{self.dtype}{list(self.data.shape)}"


def scaled_matmul(
    ops: OpTable,
    x: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    block_size: tuple[int, int] | None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """`[M, K] @ codes.T` through the op for the codes' format.

    Args:
        ops: the op table.
        x: `[M, K]` float activations.
        weight: FP8 `[N, K]` or packed MXFP4 `[N, K / 2]` codes.
        scale: the codes' scales (`npu_ops.ops.quant.fp8_block_matmul` / `mxfp4_matmul`).
        block_size: FP8 `(block_n, block_k)`, or None for MXFP4.
        bias: `[N]` or None.

    Returns:
        `[M, N]` in `x.dtype`.
    """
    if block_size is None:
        return ops.mxfp4_matmul(x, weight, scale, bias)
    return ops.fp8_block_matmul(x, weight, scale, block_size, bias)


class BlockScaledLinear(nn.Module):
    """`nn.Linear` with FP8 block-scaled (or MXFP4) codes as its weight.

    Args:
        weight: float8_e4m3fn `[out, in]`, or packed e2m1 `[out, in / 2]` for MXFP4.
        scale: FP8: `[ceil(out / bn), ceil(in / bk)]` float32 or float8_e8m0fnu
            (`weight_scale_inv`); MXFP4: float8_e8m0fnu `[out, ceil(in / 32)]`.
        block_size: FP8 `(bn, bk)`, or None for MXFP4.
        in_features: the float layer's input width.
        bias: float `[out]` or None.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        scale: torch.Tensor,
        block_size: tuple[int, int] | None,
        in_features: int,
        bias: torch.Tensor | None,
    ) -> None:
        super().__init__()
        self.out_features = int(weight.shape[0])
        self.in_features = in_features
        self.weight = Packed(weight)
        self.weight_scale_inv = Packed(scale)
        self.block_size = block_size
        self.bias = None if bias is None else _frozen(bias)
        self._ops = active_ops()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., in]` float -> `[..., out]` in `x.dtype`."""
        flat = x.reshape(-1, self.in_features)
        weight, scale = self.weight.get(), self.weight_scale_inv.get()
        out = scaled_matmul(self._ops, flat, weight, scale, self.block_size, self.bias)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        fmt = "MXFP4" if self.block_size is None else f"FP8 blocks {list(self.block_size)}"
        return f"in_features={self.in_features}, out_features={self.out_features}, {fmt}"
