"""`npu` W8A8: `npu_dynamic_quant` and `npu_quant_matmul`.

- `torch_npu.npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None)
  -> (y int8, scale float32)` — Ascend op-plugin docs/context/torch_npu-npu_dynamic_quant.md.
- `torch_npu.npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
  output_dtype=None, group_sizes=None)` — docs/context/torch_npu-npu_quant_matmul.md. The
  Atlas A2 dtype table allows, for `output_dtype` bfloat16: scale float32/bfloat16, bias
  int32/bfloat16/float32, pertoken_scale float32; for float16: scale float32, bias int32/float32,
  pertoken_scale float32 (required when scale is float32). A float bias is therefore passed as
  float32, valid for both.
"""

from __future__ import annotations

import torch

from npu_ops.ops.npu.module import torch_npu
from npu_ops.ops.quant import QUANT_OUTPUT_DTYPES


def dynamic_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token int8 quantisation; see `npu_ops.ops.quant.dynamic_quant`."""
    y, scale = torch_npu().npu_dynamic_quant(x)
    return y, scale


def quant_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    pertoken_scale: torch.Tensor,
    output_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """W8A8 matmul with per-channel × per-token dequant; see `npu_ops.ops.quant.quant_matmul`.

    Raises:
        ValueError: unsupported output dtype.
    """
    if output_dtype not in QUANT_OUTPUT_DTYPES:
        raise ValueError(f"output_dtype must be one of {QUANT_OUTPUT_DTYPES}, got {output_dtype}")
    if bias is not None and bias.dtype != torch.int32:
        bias = bias.float()
    return torch_npu().npu_quant_matmul(
        x,
        weight,
        weight_scale.float(),
        pertoken_scale=pertoken_scale.float(),
        bias=bias,
        output_dtype=output_dtype,
    )
