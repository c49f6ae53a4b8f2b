"""`npu` block-scaled FP8 and MXFP4 linears and experts: Ascend 950's native FP8 / FP4 matmuls.

Ascend 950PR/950DT multiply FP8 and MX operands in `torch_npu.npu_quant_matmul` (op-plugin
docs/context/torch_npu-npu_quant_matmul.md, "Ascend 950PR/Ascend 950DT": `x1`/`x2` may be
`float8_e4m3fn` or `float4_e2m1fn_x2` (then `x2_dtype`), `scale` / `pertoken_scale` may be
`float8_e8m0fnu` (then `scale_dtype` / `pertoken_scale_dtype`), and `group_sizes` `[gm, gn, gk]`
selects the mode; `out[m, n] = sum_j (x1[m, jK] . x2[jK, n]) * x1Scale[m / gm, j] *
x2Scale[j, n / gn] + bias[n]`, a last K slice shorter than `gk` allowed). Both modes quantise
the activations per call, so unlike the weight-only references these are W8A8 products:

- `fp8_block_matmul`, G-B mode (`group_sizes=[1, 128, 128]`, the only G-B grouping the doc
  allows): the checkpoint's e4m3 weight `[N, K]` passed as its transposed view `[K, N]` with its
  float32 `weight_scale_inv` transposed alike ("the transpose of scale must follow x2's"), the
  activations quantised per token and 128 columns to e4m3 with a float32 scale `amax / 448`
  (`npu_ops.ops.quant.quantize_fp8_groups`). The call is the one MindSpeed's FP8 block recipe
  makes (`npu_quant_matmul(x, w.t(), w_scale.t(), pertoken_scale=x_scale, group_sizes=[1, 128,
  128])`). Other weight block sizes run the reference.
- `mxfp4_matmul`, MX mode (`[1, 1, 32]`) as vLLM-Ascend's `AscendW4A8MXFPDynamicLinearMethod`
  (quantization/methods/w4a8_mxfp.py): activations to MXFP8 by `npu_dynamic_mx_quant(x,
  dst_type=float8_e4m3fn)` (hicann/ops-nn quant/dynamic_mx_quant: per 32 values `2^(floor(log2
  amax) - 8)`, scales `[M, K / 64, 2]`), the packed e2m1 weight `[N, K / 2]` as its transposed
  view with `x2_dtype=float4_e2m1fn_x2`, and its UE8M0 scales `[N, K / 32]` regrouped to
  `[K / 64, N, 2]` (`reshape(n, k // 64, 2).transpose(0, 1)`, the method's
  `process_weights_after_loading`). K must be a multiple of 64 (whole scale pairs).
- `mxfp4_grouped_matmul`: the routed experts' MXFP4 linears in one `npu_grouped_matmul`
  (see the function).

On any other NPU (Atlas A2/A3: no FP8/FP4 cube; the loader converts these checkpoints to W8A8 at
load) and for float32 activations, the references run on the device.
"""

from __future__ import annotations

import torch

from npu_ops.ops import quant
from npu_ops.ops.npu.module import torch_npu
from npu_ops.platform import is_ascend_950

FP8_GROUP = 128
"""G-B mode's `group_k` (and the weight's block): `group_sizes=[1, 128, 128]`."""
MX_GROUP_SIZES = [1, 1, 32]
HALF_DTYPES = (torch.float16, torch.bfloat16)
"""Activation dtypes of the 950 kernels (`npu_dynamic_mx_quant` takes float16/bfloat16)."""


def _float_bias(bias: torch.Tensor | None) -> torch.Tensor | None:
    return None if bias is None else bias.float()


def fp8_block_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale_inv: torch.Tensor,
    block_size: tuple[int, int],
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Shapes as `npu_ops.ops.quant.fp8_block_matmul`; on Ascend 950 with 128 x 128 blocks and
    float16/bfloat16 `x`, the G-B FP8 matmul (module doc), else the reference.

    Raises:
        ValueError: as `npu_ops.ops.quant.check_fp8_block`.
    """
    quant.check_fp8_block(weight, weight_scale_inv, block_size)
    if not (is_ascend_950() and block_size == (FP8_GROUP, FP8_GROUP) and x.dtype in HALF_DTYPES):
        return quant.fp8_block_matmul(x, weight, weight_scale_inv, block_size, bias)
    codes, scale = quant.quantize_fp8_groups(x, FP8_GROUP)
    return torch_npu().npu_quant_matmul(
        codes,
        weight.t(),
        weight_scale_inv.float().t(),
        pertoken_scale=scale,
        bias=_float_bias(bias),
        output_dtype=x.dtype,
        group_sizes=[1, FP8_GROUP, FP8_GROUP],
    )


def mxfp4_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Shapes as `npu_ops.ops.quant.mxfp4_matmul`; on Ascend 950 with K a multiple of 64 and
    float16/bfloat16 `x`, the MX FP8 x FP4 matmul (module doc), else the reference.

    Raises:
        ValueError: as `npu_ops.ops.quant.check_mxfp4`.
    """
    quant.check_mxfp4(weight, weight_scale)
    n, k = weight.shape[0], 2 * weight.shape[1]
    if not (is_ascend_950() and k % (2 * quant.MXFP4_BLOCK) == 0 and x.dtype in HALF_DTYPES):
        return quant.mxfp4_matmul(x, weight, weight_scale, bias)
    npu = torch_npu()
    codes, scale = npu.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn)
    pairs = weight_scale.view(torch.uint8).reshape(n, k // (2 * quant.MXFP4_BLOCK), 2)
    return npu.npu_quant_matmul(
        codes,
        weight.view(torch.uint8).t(),
        pairs.transpose(0, 1),
        scale_dtype=npu.float8_e8m0fnu,
        pertoken_scale=scale,
        pertoken_scale_dtype=npu.float8_e8m0fnu,
        bias=_float_bias(bias),
        output_dtype=x.dtype,
        x2_dtype=npu.float4_e2m1fn_x2,
        group_sizes=MX_GROUP_SIZES,
    )


def mxfp4_grouped_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    group_sizes: torch.Tensor,
) -> torch.Tensor:
    """Shapes as `npu_ops.ops.quant.mxfp4_grouped_matmul`; on Ascend 950 with K a multiple of 64
    and float16/bfloat16 `x`, one `npu_grouped_matmul` over every expert (module doc), else the
    reference.

    The call is vLLM-Ascend's W4A8_MXFP MoE (ops/fused_moe/moe_mlp.py): activations to MXFP8 by
    `npu_dynamic_mx_quant`, `x_dtype=float8_e4m3fn`, the packed weights `[E, N, K / 2]` as their
    transposed views `[E, K / 2, N]` with `weight_dtype=float4_e2m1fn_x2`, their UE8M0 scales as
    `antiquant_scale` regrouped to `[E, K / 64, N, 2]`, the activation scales as
    `per_token_scale` (`per_token_scale_dtype=float8_e8m0fnu`), `split_item=2` (one output),
    `group_type=0` (groups along M) and `group_list` the cumulative row counts
    (`group_list_type=0`; op-plugin docs/context/torch_npu-npu_grouped_matmul.md).

    Raises:
        ValueError: as the reference.
    """
    e, n, half_k = weight.shape
    k = 2 * half_k
    if not (is_ascend_950() and k % (2 * quant.MXFP4_BLOCK) == 0 and x.dtype in HALF_DTYPES):
        return quant.mxfp4_grouped_matmul(x, weight, weight_scale, group_sizes)
    if len(group_sizes) != e:
        raise ValueError(f"group_sizes must give {e} experts' rows, got {len(group_sizes)}")
    npu = torch_npu()
    codes, scale = npu.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn)
    pairs = weight_scale.view(torch.uint8).reshape(e, n, k // (2 * quant.MXFP4_BLOCK), 2)
    (out,) = npu.npu_grouped_matmul(
        [codes],
        [weight.view(torch.uint8).transpose(1, 2)],
        antiquant_scale=[pairs.transpose(1, 2)],
        per_token_scale=[scale],
        per_token_scale_dtype=npu.float8_e8m0fnu,
        group_list=torch.cumsum(group_sizes.to(torch.int64), 0),
        split_item=2,
        group_type=0,
        group_list_type=0,
        x_dtype=torch.float8_e4m3fn,
        weight_dtype=npu.float4_e2m1fn_x2,
        output_dtype=x.dtype,
    )
    return out
