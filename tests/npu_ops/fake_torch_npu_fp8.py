"""torch_npu stand-ins for Ascend 950's FP8 / MX ops (see `fake_torch_npu`).

- `npu_quant_matmul`: the 950 signature (op-plugin docs/context/torch_npu-npu_quant_matmul.md,
  with `x1_dtype`, `x2_dtype`, `pertoken_scale_dtype`, `scale_dtype`, `group_sizes`, `y_scale`);
  int8 operands go to the Atlas A2 stand-in, the G-B (`[1, 128, 128]`) and MX (`[1, 1, 32]`)
  modes are computed with the doc's formula `out[m, n] = sum_j (x1 slice . x2 slice) *
  x1Scale[m / gm, j] * x2Scale[j, n / gn] + bias[n]`, K sliced by `group_k`.
- `npu_grouped_matmul`: the MX grouping of vLLM-Ascend's W4A8_MXFP MoE, each group the MX
  `npu_quant_matmul`.
- `npu_dynamic_mx_quant`: hicann/ops-nn quant/dynamic_mx_quant (OCP, `scale_alg=0`): per 32
  values along the last axis `mxscale = 2^(floor(log2(amax)) - emax)` (emax 8 for e4m3), `y =
  cast(x / mxscale)`; the scales as `[M, K / 64, 2]` float8_e8m0fnu, as vLLM-Ascend reads them.
"""

from __future__ import annotations

import types

import fake_torch_npu
import torch
from fake_torch_npu_moe import npu_quant_matmul as a2_quant_matmul
from fake_torch_npu_util import HALVES, record

from npu_ops.ops.quant import FP4_E2M1_VALUES

E4M3_EMAX = 8
E4M3_MAX = 448.0


def _sliced_sum(
    x1: torch.Tensor, x2: torch.Tensor, x1_scale: torch.Tensor, x2_scale: torch.Tensor, gk: int
) -> torch.Tensor:
    """The doc's formula with per-slice scales already expanded over m and n: x1_scale
    `[M, kLoops]`, x2_scale `[kLoops, N]`."""
    k = x1.shape[1]
    out = torch.zeros(x1.shape[0], x2.shape[1], dtype=torch.float64)
    for j, start in enumerate(range(0, k, gk)):
        part = x1[:, start : start + gk].double() @ x2[start : start + gk].double()
        out += part * x1_scale[:, j : j + 1].double() * x2_scale[j : j + 1].double()
    return out


def _e2m1(packed: torch.Tensor) -> torch.Tensor:
    """uint8 `[..., C]`, two e2m1 values a byte, low nibble first -> float64 `[..., 2C]`."""
    table = torch.tensor(FP4_E2M1_VALUES, dtype=torch.float64)
    lo, hi = table[(packed & 0xF).long()], table[(packed >> 4).long()]
    return torch.stack([lo, hi], dim=-1).flatten(-2)


def npu_quant_matmul(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    *,
    offset: torch.Tensor | None = None,
    pertoken_scale: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    output_dtype: torch.dtype | None = None,
    x1_dtype: torch.dtype | None = None,
    x2_dtype: torch.dtype | None = None,
    pertoken_scale_dtype: torch.dtype | None = None,
    scale_dtype: torch.dtype | None = None,
    group_sizes: list[int] | None = None,
    y_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """torch_npu.npu_quant_matmul, Ascend 950PR/950DT (module doc)."""
    if x1.dtype == torch.int8:
        assert x1_dtype is None and x2_dtype is None and group_sizes is None
        return a2_quant_matmul(
            x1,
            x2,
            scale,
            offset=offset,
            pertoken_scale=pertoken_scale,
            bias=bias,
            output_dtype=output_dtype,
        )
    record(
        "npu_quant_matmul",
        x1=x1,
        x2=x2,
        scale=scale,
        pertoken_scale=pertoken_scale,
        bias=bias,
        output_dtype=output_dtype,
        x2_dtype=x2_dtype,
        pertoken_scale_dtype=pertoken_scale_dtype,
        scale_dtype=scale_dtype,
        group_sizes=group_sizes,
        x2_transposed=x2.stride() == (1, x2.shape[0]),
        scale_transposed=scale.stride()[0] == 1,
    )
    assert offset is None and y_scale is None and x1_dtype is None
    assert output_dtype in HALVES and x1.dim() == 2 and x2.dim() == 2 and pertoken_scale is not None
    assert bias is None or (bias.dtype == torch.float32 and tuple(bias.shape) == (x2.shape[1],))
    assert x1.dtype == torch.float8_e4m3fn, x1.dtype
    m, k = x1.shape
    n = x2.shape[1]
    if group_sizes == [1, 128, 128]:  # G-B: float32 scales, x1 per token-group, x2 per block
        assert x2.dtype == torch.float8_e4m3fn and x2.shape[0] == k and x2_dtype is None
        loops, nb = -(-k // 128), -(-n // 128)
        assert scale.dtype == torch.float32 and tuple(scale.shape) == (loops, nb)
        assert (x2.stride()[0] == 1) == (scale.stride()[0] == 1), "scale transposed as x2"
        assert pertoken_scale.dtype == torch.float32 and tuple(pertoken_scale.shape) == (m, loops)
        x2_scale = scale.repeat_interleave(128, dim=1)[:, :n]
        out = _sliced_sum(x1.float(), x2.float(), pertoken_scale, x2_scale, 128)
    else:  # MX: e8m0 scale pairs, x2 packed e2m1 [K / 2, N]
        assert group_sizes == [1, 1, 32], group_sizes
        assert x2_dtype == torch.float4_e2m1fn_x2 and x2.dtype == torch.uint8
        assert scale_dtype == torch.float8_e8m0fnu and pertoken_scale_dtype == scale_dtype
        assert x2.shape[0] * 2 == k and k % 64 == 0
        assert tuple(scale.shape) == (k // 64, n, 2) and scale.element_size() == 1
        assert tuple(pertoken_scale.shape) == (m, k // 64, 2)
        w = _e2m1(x2.t().contiguous()).t()  # [K, N]
        x2_scale = scale.contiguous().view(torch.float8_e8m0fnu).float()
        x2_scale = x2_scale.permute(0, 2, 1).reshape(k // 32, n)
        x1_scale = pertoken_scale.contiguous().view(torch.float8_e8m0fnu).float().view(m, -1)
        out = _sliced_sum(x1.float(), w.float(), x1_scale, x2_scale, 32)
    if bias is not None:
        out = out + bias.double()
    return out.to(output_dtype)


def npu_dynamic_mx_quant(
    x: torch.Tensor,
    *,
    axis: int = -1,
    round_mode: str = "rint",
    dst_type: torch.dtype = torch.float8_e4m3fn,
    block_size: int = 32,
    scale_alg: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """torch_npu.npu_dynamic_mx_quant (module doc), e4m3 along the last axis."""
    record("npu_dynamic_mx_quant", x=x, axis=axis, dst_type=dst_type, block_size=block_size)
    assert x.dtype in HALVES and x.dim() == 2 and axis == -1 and block_size == 32
    assert dst_type == torch.float8_e4m3fn and scale_alg == 0 and round_mode == "rint"
    m, k = x.shape
    assert k % 64 == 0, "modelled: whole scale pairs"
    blocks = x.float().view(m, k // 32, 32)
    amax = blocks.abs().amax(dim=-1)
    exp = torch.where(
        amax > 0, torch.floor(torch.log2(amax)) - E4M3_EMAX, torch.full_like(amax, -127)
    )
    mxscale = torch.exp2(exp)
    y = (blocks / mxscale[..., None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return y.view(m, k), mxscale.to(torch.float8_e8m0fnu).view(m, k // 64, 2)


def make_module() -> types.ModuleType:
    """The `torch_npu` stand-in of an Ascend 950: the base module with the ops above and the
    `float8_e8m0fnu` / `float4_e2m1fn_x2` dtype names (torch's dtypes stand for torch_npu's)."""
    module = fake_torch_npu.make_module()
    module.npu_quant_matmul = npu_quant_matmul
    module.npu_dynamic_mx_quant = npu_dynamic_mx_quant
    module.npu_grouped_matmul = npu_grouped_matmul
    module.float8_e8m0fnu = torch.float8_e8m0fnu
    module.float4_e2m1fn_x2 = torch.float4_e2m1fn_x2
    return module


def npu_grouped_matmul(
    x: list[torch.Tensor],
    weight: list[torch.Tensor],
    *,
    bias: list[torch.Tensor] | None = None,
    scale: list[torch.Tensor] | None = None,
    offset: list[torch.Tensor] | None = None,
    antiquant_scale: list[torch.Tensor] | None = None,
    antiquant_offset: list[torch.Tensor] | None = None,
    per_token_scale: list[torch.Tensor] | None = None,
    group_list: torch.Tensor | None = None,
    activation_input: list[torch.Tensor] | None = None,
    activation_quant_scale: list[torch.Tensor] | None = None,
    activation_quant_offset: list[torch.Tensor] | None = None,
    split_item: int = 0,
    group_type: int = -1,
    group_list_type: int = 0,
    act_type: int = 0,
    output_dtype: torch.dtype | None = None,
    x_dtype: torch.dtype | None = None,
    weight_dtype: torch.dtype | None = None,
    scale_dtype: torch.dtype | None = None,
    per_token_scale_dtype: torch.dtype | None = None,
) -> list[torch.Tensor]:
    """torch_npu.npu_grouped_matmul (op-plugin docs/context/torch_npu-npu_grouped_matmul.md),
    modelled: Ascend 950's MXFP8 x MXFP4 grouping along M with one output (split_item 2), the
    arguments of vLLM-Ascend's W4A8_MXFP MoE; each group is the MX `npu_quant_matmul` above."""
    record(
        "npu_grouped_matmul",
        x=x[0],
        weight=weight[0],
        antiquant_scale=antiquant_scale[0] if antiquant_scale else None,
        per_token_scale=per_token_scale[0] if per_token_scale else None,
        group_list=group_list,
        split_item=split_item,
        group_type=group_type,
        group_list_type=group_list_type,
        x_dtype=x_dtype,
        weight_dtype=weight_dtype,
        per_token_scale_dtype=per_token_scale_dtype,
        output_dtype=output_dtype,
    )
    assert len(x) == len(weight) == 1 and split_item == 2 and group_type == 0
    assert group_list_type == 0 and group_list is not None and group_list.dtype == torch.int64
    assert x_dtype == torch.float8_e4m3fn and weight_dtype == torch.float4_e2m1fn_x2
    assert per_token_scale_dtype == torch.float8_e8m0fnu and scale is None and bias is None
    assert antiquant_scale is not None and per_token_scale is not None
    assert offset is None and antiquant_offset is None and activation_input is None
    assert activation_quant_scale is None and activation_quant_offset is None and act_type == 0
    xs, ws, scales, tokens = x[0], weight[0], antiquant_scale[0], per_token_scale[0]
    e, half_k, n = ws.shape
    assert tuple(scales.shape) == (e, half_k // 32, n, 2) and group_list.shape == (e,)
    out = torch.empty(xs.shape[0], n, dtype=output_dtype)
    start = 0
    for g, end in enumerate(group_list.tolist()):
        if end > start:
            out[start:end] = npu_quant_matmul(
                xs[start:end],
                ws[g],
                scales[g],
                scale_dtype=torch.float8_e8m0fnu,
                pertoken_scale=tokens[start:end],
                pertoken_scale_dtype=torch.float8_e8m0fnu,
                output_dtype=output_dtype,
                x2_dtype=torch.float4_e2m1fn_x2,
                group_sizes=[1, 1, 32],
            )
        start = end
    return [out]
