"""MoE token dispatch and combine: sort tokens by expert, run experts, weight and un-sort.

With `T` tokens routed to `k` experts each, dispatch makes `T * k` rows ordered by expert id
(stable, so rows of one expert keep token order); the experts run on contiguous row ranges;
combine sums each token's `k` expert outputs weighted by its router weights. The index
conventions are the Ascend routing ops' (`torch_npu.npu_moe_init_routing` and
`torch_npu.npu_moe_finalize_routing`, Ascend op-plugin docs/context/
torch_npu-npu_moe_init_routing.md and torch_npu-npu_moe_finalize_routing.md; the CPU formula in
op-plugin test/test_custom_ops/test_npu_moe_init_routing.py): a (token `i`, slot `j`) pair is
"source row" `j * T + i` (slot-major), and `expanded_row_idx[j * T + i]` is the sorted row that
holds it.

Expert parallel: experts are split into `ep_size` contiguous ranges, one per rank. After dispatch
the sorted rows for rank `r` are contiguous, so the all-to-all send counts are the per-rank sums
of `tokens_per_expert` (`expert_parallel_splits`); the reverse all-to-all uses the transposed
counts. On one rank (`ep_size == 1`) dispatch/combine are exactly a permutation and its inverse.
"""

from __future__ import annotations

import torch


def tokens_per_expert(topk_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Rows each expert receives: int64 `[num_experts]`."""
    return torch.bincount(topk_ids.flatten().long(), minlength=num_experts)


def moe_dispatch(
    hidden: torch.Tensor, topk_ids: torch.Tensor, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Replicate each token once per chosen expert and sort the rows by expert.

    Args:
        hidden: `[T, H]` token activations.
        topk_ids: int32 `[T, k]` chosen experts (from a gating op).
        num_experts: E, the number of experts.

    Returns:
        `(sorted_hidden, expanded_row_idx, counts)`: `[T * k, H]` rows grouped by ascending
        expert id; int32 `[T * k]` mapping slot-major source row `j * T + i` to its sorted row;
        int64 `[E]` rows per expert.
    """
    num_tokens, k = topk_ids.shape
    order = torch.argsort(topk_ids.flatten(), stable=True)  # sorted row -> i * k + j
    token = order // k
    slot_major = (order % k) * num_tokens + token
    expanded_row_idx = torch.empty_like(order)
    expanded_row_idx[slot_major] = torch.arange(order.numel(), device=order.device)
    return (
        hidden.index_select(0, token),
        expanded_row_idx.to(torch.int32),
        tokens_per_expert(topk_ids, num_experts),
    )


def moe_combine(
    expert_out: torch.Tensor,
    expanded_row_idx: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Sum each token's expert outputs, weighted by its router weights.

    Args:
        expert_out: `[T * k, H]` expert outputs in dispatch (sorted) order.
        expanded_row_idx: int32 `[T * k]` from `moe_dispatch`.
        topk_weights: `[T, k]` router weights.
        topk_ids: int32 `[T, k]` chosen experts (the finalize op takes them; unused here
            since there is no per-expert bias).

    Returns:
        `[T, H]` in `expert_out.dtype`:
        `out[i] = sum_j topk_weights[i, j] * expert_out[expanded_row_idx[j * T + i]]`.
    """
    num_tokens, k = topk_weights.shape
    rows = expanded_row_idx.long().view(k, num_tokens).t()  # [T, k]
    gathered = expert_out.float()[rows]  # [T, k, H]
    out = (gathered * topk_weights.float().unsqueeze(-1)).sum(dim=1)
    return out.to(expert_out.dtype)


def expert_parallel_splits(counts: torch.Tensor, ep_size: int) -> list[int]:
    """All-to-all send counts: rows for each rank when experts are split evenly by rank.

    Args:
        counts: int64 `[E]` rows per expert (from `moe_dispatch`).
        ep_size: expert-parallel ranks; E must be a multiple.

    Returns:
        `ep_size` host ints, rank `r` owning experts `[r * E / ep_size, (r + 1) * E / ep_size)`.

    Raises:
        ValueError: E is not a multiple of `ep_size`.
    """
    if ep_size < 1 or counts.numel() % ep_size != 0:
        raise ValueError(f"{counts.numel()} experts do not split evenly over {ep_size} ranks")
    return [int(c) for c in counts.view(ep_size, -1).sum(dim=1).tolist()]
