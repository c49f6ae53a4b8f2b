"""torch_npu stand-ins for the MoE routing and W8A8 ops (see `fake_torch_npu`).

Routing answers are computed with the formulas of the Ascend docs and op-plugin tests (not with
the project's references), so the index conventions are checked independently.
"""

from __future__ import annotations

from typing import Any

import torch
from fake_torch_npu_util import FLOATS, HALVES, record

from npu_ops.ops import moe_gating, quant


def npu_moe_gating_top_k(
    x: torch.Tensor,
    k: int,
    *,
    bias: torch.Tensor | None = None,
    k_group: int = 1,
    group_count: int = 1,
    group_select_mode: int = 0,
    renorm: int = 0,
    norm_type: int = 0,
    out_flag: bool = False,
    routed_scaling_factor: float = 1.0,
    eps: float = 1e-20,
) -> Any:
    """torch_npu.npu_moe_gating_top_k (op-plugin docs); modelled: sigmoid + top-2-sum groups."""
    record(
        "npu_moe_gating_top_k",
        x=x,
        k=k,
        bias=bias,
        k_group=k_group,
        group_count=group_count,
        group_select_mode=group_select_mode,
        renorm=renorm,
        norm_type=norm_type,
        routed_scaling_factor=routed_scaling_factor,
        eps=eps,
    )
    assert x.dim() == 2 and x.dtype in FLOATS
    experts = x.shape[-1]
    assert experts <= 2048
    assert bias is not None, "Atlas A2 requires a bias"
    assert bias.dim() == 1 and bias.shape[0] == experts and bias.dtype == x.dtype, bias.dtype
    assert group_count > 0 and experts % group_count == 0 and experts // group_count > 2
    assert 1 <= k_group <= group_count
    assert 1 <= k <= experts // group_count * k_group
    assert renorm == 0, "only renorm=0 is supported"
    assert norm_type in (0, 1) and group_select_mode in (0, 1)
    assert (norm_type, group_select_mode) == (1, 1), "modelled: DeepSeek-V3 routing only"
    y, idx = moe_gating.moe_grouped_topk(x, bias, k, group_count, k_group, routed_scaling_factor)
    return y, idx, x.float().sigmoid()


def npu_moe_gating_top_k_softmax(
    x: torch.Tensor, finished: torch.Tensor | None = None, k: int = 1
) -> Any:
    """torch_npu.npu_moe_gating_top_k_softmax(x, finished=None, k=1) (op-plugin docs)."""
    record("npu_moe_gating_top_k_softmax", x=x, finished=finished, k=k)
    assert x.dim() in (2, 3) and x.dtype in FLOATS
    assert finished is None or (finished.dtype == torch.bool and finished.shape == x.shape[:-1])
    assert 0 < k <= min(x.shape[-1], 1024)
    y, idx = torch.softmax(x.float(), dim=-1).topk(k, dim=-1)
    rows = x.shape[0]
    row_idx = torch.arange(rows * k, dtype=torch.int32).view(k, rows).t()  # aclnn formula
    return y.to(x.dtype), idx.to(torch.int32), row_idx


def npu_moe_init_routing(
    x: torch.Tensor, row_idx: torch.Tensor, expert_idx: torch.Tensor, active_num: int
) -> Any:
    """torch_npu.npu_moe_init_routing; answer from op-plugin's test `cpu_op_exec`."""
    record(
        "npu_moe_init_routing", x=x, row_idx=row_idx, expert_idx=expert_idx, active_num=active_num
    )
    assert x.dim() == 2 and x.dtype in FLOATS and x.numel() < 2**24
    assert expert_idx.dim() == 2 and expert_idx.dtype == torch.int32
    assert row_idx.dtype == torch.int32 and row_idx.shape == expert_idx.shape
    assert expert_idx.shape[0] == x.shape[0] and isinstance(active_num, int)
    num_rows, k = expert_idx.shape
    sort_order = torch.argsort(expert_idx.reshape(-1).long(), stable=True)
    expanded_expert_idx = expert_idx.reshape(-1)[sort_order]
    dst_to_src = row_idx.reshape(-1)[sort_order].long()
    expanded_row_idx = torch.zeros(dst_to_src.shape, dtype=torch.int32)
    expanded_row_idx[dst_to_src] = torch.arange(dst_to_src.numel(), dtype=torch.int32)
    active = min(active_num, num_rows) * k
    expanded_x = x[dst_to_src[:active] % num_rows]
    return expanded_x, expanded_row_idx, expanded_expert_idx


def npu_moe_finalize_routing(
    expanded_permuted_rows: torch.Tensor,
    skip1: torch.Tensor | None,
    skip2: torch.Tensor | None,
    bias: torch.Tensor | None,
    scales: torch.Tensor | None,
    expanded_src_to_dst_row: torch.Tensor,
    export_for_source_row: torch.Tensor | None,
    drop_pad_mode: int = 0,
) -> torch.Tensor:
    """torch_npu.npu_moe_finalize_routing; answer from the doc formula (a loop)."""
    record(
        "npu_moe_finalize_routing",
        expanded_permuted_rows=expanded_permuted_rows,
        skip1=skip1,
        skip2=skip2,
        bias=bias,
        scales=scales,
        expanded_src_to_dst_row=expanded_src_to_dst_row,
        export_for_source_row=export_for_source_row,
        drop_pad_mode=drop_pad_mode,
    )
    rows = expanded_permuted_rows
    assert rows.dim() == 2 and rows.dtype in FLOATS
    assert skip2 is not None or skip1 is None, "skip1 must be None when skip2 is None"
    assert scales is not None and scales.dtype == rows.dtype and scales.dim() == 2
    num_rows, k = scales.shape
    assert rows.shape[0] == num_rows * k
    assert expanded_src_to_dst_row.dtype == torch.int32
    assert tuple(expanded_src_to_dst_row.shape) == (num_rows * k,)
    assert export_for_source_row is None or (
        export_for_source_row.dtype == torch.int32
        and tuple(export_for_source_row.shape) == (num_rows, k)
    )
    assert drop_pad_mode == 0
    out = torch.zeros(num_rows, rows.shape[1], dtype=torch.float64)
    for i in range(num_rows):
        for j in range(k):
            dst = int(expanded_src_to_dst_row[j * num_rows + i])
            out[i] += float(scales[i, j]) * rows[dst].double()
    return out.to(rows.dtype)


def npu_dynamic_quant(
    x: torch.Tensor,
    *,
    smooth_scales: torch.Tensor | None = None,
    group_index: torch.Tensor | None = None,
    dst_type: torch.dtype | None = None,
) -> Any:
    """torch_npu.npu_dynamic_quant (op-plugin docs): per-token symmetric int8."""
    record("npu_dynamic_quant", x=x, smooth_scales=smooth_scales, dst_type=dst_type)
    assert x.dim() > 1 and x.dtype in HALVES, (x.dim(), x.dtype)
    assert dst_type in (None, torch.int8)
    return quant.dynamic_quant(x)


_BIAS_OK = {
    torch.bfloat16: (torch.int32, torch.bfloat16, torch.float32),
    torch.float16: (torch.int32, torch.float16, torch.bfloat16, torch.float32),
}
_SCALE_OK = {torch.bfloat16: (torch.float32, torch.bfloat16), torch.float16: (torch.float32,)}


def npu_quant_matmul(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    *,
    offset: torch.Tensor | None = None,
    pertoken_scale: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    output_dtype: torch.dtype | None = None,
    group_sizes: list[int] | None = None,
) -> torch.Tensor:
    """torch_npu.npu_quant_matmul (op-plugin docs), Atlas A2 int8 dtype table."""
    record(
        "npu_quant_matmul",
        x1=x1,
        x2=x2,
        scale=scale,
        offset=offset,
        pertoken_scale=pertoken_scale,
        bias=bias,
        output_dtype=output_dtype,
    )
    assert x1.dtype == torch.int8 and x2.dtype == torch.int8
    assert 2 <= x1.dim() <= 6 and 2 <= x2.dim() <= 6
    m, k = x1.shape[-2:]
    k2, n = x2.shape[-2:]
    assert k == k2 and k <= 65535 and n <= 65535, (x1.shape, x2.shape)
    assert output_dtype in (torch.bfloat16, torch.float16), "modelled: float outputs"
    assert scale.dim() == 1 and scale.shape[0] in (1, n)
    assert scale.dtype in _SCALE_OK[output_dtype], scale.dtype
    assert offset is None
    assert pertoken_scale is not None, "modelled with per-token scale (W8A8 dynamic)"
    assert pertoken_scale.dtype == torch.float32 and tuple(pertoken_scale.shape) == (m,)
    assert bias is None or (bias.dtype in _BIAS_OK[output_dtype] and tuple(bias.shape) == (n,))
    acc = x1.double() @ x2.double()
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias.double()
    out = acc * scale.double() * pertoken_scale.double().unsqueeze(-1)
    if bias is not None and bias.dtype != torch.int32:
        out = out + bias.double()
    return out.to(output_dtype)
