"""`npu` MoE gating, dispatch and combine.

Signatures from the Ascend op-plugin API docs (docs/context/…):
- `npu_moe_gating_top_k(x, k, *, bias=None, k_group=1, group_count=1, group_select_mode=0,
  renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0, eps=1e-20)
  -> (yOut, expertIdxOut int32, normOut float32)` — torch_npu-npu_moe_gating_top_k.md.
  DeepSeek-V3 routing is `norm_type=1` (sigmoid), `group_select_mode=1` (top-2 sum), `renorm=0`.
  The bias dtype must equal `x`'s; Atlas A2 requires a bias, so None becomes zeros.
- `npu_moe_gating_top_k_softmax(x, finished=None, k=1) -> (y, expert_idx int32, row_idx int32)`
  — torch_npu-npu_moe_gating_top_k_softmax.md.
- `npu_moe_init_routing(x, row_idx, expert_idx, active_num) -> (expanded_x, expanded_row_idx,
  expanded_expert_idx)` with `row_idx[i, j] = j * T + i` (int32, the `row_idx` the softmax
  gating op returns) — torch_npu-npu_moe_init_routing.md and op-plugin
  test/test_custom_ops/test_npu_moe_init_routing.py.
- `npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales,
  expanded_src_to_dst_row, export_for_source_row, drop_pad_mode=0)` with `skip1`, `skip2`,
  `bias` None and `scales` in the rows' dtype — torch_npu-npu_moe_finalize_routing.md.
"""

from __future__ import annotations

import torch

from npu_ops.ops.moe_gating import RENORM_EPS, check_grouping
from npu_ops.ops.moe_routing import tokens_per_expert
from npu_ops.ops.npu.module import torch_npu


def moe_grouped_topk(
    logits: torch.Tensor,
    bias: torch.Tensor | None,
    top_k: int,
    num_groups: int,
    topk_groups: int,
    routed_scaling_factor: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 routing through `npu_moe_gating_top_k`; see `moe_gating.moe_grouped_topk`."""
    check_grouping(logits.shape[-1], top_k, num_groups, topk_groups)
    if bias is None:
        bias = torch.zeros(logits.shape[-1], dtype=logits.dtype, device=logits.device)
    weights, ids, _norm_out = torch_npu().npu_moe_gating_top_k(
        logits,
        top_k,
        bias=bias.to(logits.dtype),
        k_group=topk_groups,
        group_count=num_groups,
        group_select_mode=1,
        renorm=0,
        norm_type=1,
        out_flag=False,
        routed_scaling_factor=routed_scaling_factor,
        eps=RENORM_EPS,
    )
    return weights, ids


def moe_topk_softmax(
    logits: torch.Tensor, top_k: int, renormalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax top-k through `npu_moe_gating_top_k_softmax`; see `moe_gating.moe_topk_softmax`."""
    weights, ids, _row_idx = torch_npu().npu_moe_gating_top_k_softmax(
        logits, finished=None, k=top_k
    )
    if renormalize:
        weights = (weights.float() / weights.float().sum(dim=-1, keepdim=True)).to(logits.dtype)
    return weights, ids


def moe_dispatch(
    hidden: torch.Tensor, topk_ids: torch.Tensor, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sort token copies by expert through `npu_moe_init_routing`; see `moe_routing`."""
    num_tokens, k = topk_ids.shape
    row_idx = (
        torch.arange(num_tokens * k, dtype=torch.int32, device=hidden.device)
        .view(k, num_tokens)
        .t()
        .contiguous()
    )
    expanded_x, expanded_row_idx, _sorted_experts = torch_npu().npu_moe_init_routing(
        hidden, row_idx, topk_ids.to(torch.int32), active_num=num_tokens
    )
    return expanded_x, expanded_row_idx, tokens_per_expert(topk_ids, num_experts)


def moe_combine(
    expert_out: torch.Tensor,
    expanded_row_idx: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Weighted un-permutation through `npu_moe_finalize_routing`; see `moe_routing`."""
    return torch_npu().npu_moe_finalize_routing(
        expert_out,
        skip1=None,
        skip2=None,
        bias=None,
        scales=topk_weights.to(expert_out.dtype),
        expanded_src_to_dst_row=expanded_row_idx,
        export_for_source_row=topk_ids.to(torch.int32),
    )
