"""MoE router gating: which experts each token goes to, with what weight. Pure-torch references.

Two routers cover the MoE families served here:

- `moe_grouped_topk`: DeepSeek-V3 routing. Scores are `sigmoid(logits)`; a per-expert bias
  (`e_score_correction_bias`) is added for *selection only*; experts are split into
  `num_groups` groups, each group scored by the sum of its two best biased scores; the best
  `topk_groups` groups are kept and the `top_k` best experts among them chosen; the weights are
  the unbiased scores of the chosen experts, renormalised to sum to 1 and multiplied by
  `routed_scaling_factor`. Source: `torch_npu.npu_moe_gating_top_k` with `norm_type=1`
  (sigmoid), `group_select_mode=1` (top-2 sum), `renorm=0`
  (Ascend op-plugin docs/context/torch_npu-npu_moe_gating_top_k.md and the aclnnMoeGatingTopK
  formula: `yOut = y / (sum(y) + eps) * routedScalingFactor`); DeepSeek-V3 technical report,
  section 2.1.2; transformers `DeepseekV3TopkRouter`.
- `moe_topk_softmax`: softmax routers (Mixtral, Qwen-MoE, DeepSeek-V2 "greedy"): `top_k` of
  `softmax(logits)`, optionally renormalised. Source: `torch_npu.npu_moe_gating_top_k_softmax`
  (docs/context/torch_npu-npu_moe_gating_top_k_softmax.md: `y, expert_idx = topK(softmax(x))`).

Both return expert ids as int32, the dtype the Ascend routing ops consume.
"""

from __future__ import annotations

import torch

RENORM_EPS = 1e-20  # the `eps` of npu_moe_gating_top_k's yOut formula (its default)


def check_grouping(num_experts: int, top_k: int, num_groups: int, topk_groups: int) -> None:
    """Validate the grouped-routing sizes (constraints of `npu_moe_gating_top_k`).

    Raises:
        ValueError: experts do not split evenly into groups of more than 2, `topk_groups` is
            not within `[1, num_groups]`, or `top_k` exceeds the experts of the kept groups.
    """
    if num_groups < 1 or num_experts % num_groups != 0 or num_experts // num_groups <= 2:
        raise ValueError(
            f"{num_experts} experts must split into num_groups={num_groups} groups of more "
            "than 2 experts each"
        )
    if not 1 <= topk_groups <= num_groups:
        raise ValueError(f"topk_groups={topk_groups} must be within [1, {num_groups}]")
    if not 1 <= top_k <= num_experts // num_groups * topk_groups:
        raise ValueError(
            f"top_k={top_k} must be within [1, experts in the kept groups = "
            f"{num_experts // num_groups * topk_groups}]"
        )


def moe_grouped_topk(
    logits: torch.Tensor,
    bias: torch.Tensor | None,
    top_k: int,
    num_groups: int,
    topk_groups: int,
    routed_scaling_factor: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 sigmoid routing with grouped top-k.

    Args:
        logits: `[T, E]` router logits (float32 in DeepSeek-V3; float16/bfloat16 also valid).
        bias: `[E]` selection bias (`e_score_correction_bias`), or None.
        top_k: experts per token.
        num_groups: expert groups (`n_group`); E must be a multiple.
        topk_groups: groups kept per token (`topk_group`).
        routed_scaling_factor: multiplies the renormalised weights.

    Returns:
        `(weights, ids)`: `[T, top_k]` in `logits.dtype`, and int32 `[T, top_k]`, ordered by
        descending biased score.

    Raises:
        ValueError: invalid grouping sizes (see `check_grouping`).
    """
    num_tokens, num_experts = logits.shape
    check_grouping(num_experts, top_k, num_groups, topk_groups)
    scores = logits.float().sigmoid()
    choice = scores if bias is None else scores + bias.float()
    grouped = choice.view(num_tokens, num_groups, -1)
    group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)  # [T, G]
    kept = group_scores.topk(topk_groups, dim=-1).indices
    group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, kept, True)
    expert_mask = group_mask.unsqueeze(-1).expand_as(grouped).reshape(num_tokens, num_experts)
    masked = choice.masked_fill(~expert_mask, float("-inf"))
    ids = masked.topk(top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    weights = weights / (weights.sum(dim=-1, keepdim=True) + RENORM_EPS) * routed_scaling_factor
    return weights.to(logits.dtype), ids.to(torch.int32)


def moe_topk_softmax(
    logits: torch.Tensor, top_k: int, renormalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax routing: the `top_k` most probable experts of each token.

    Args:
        logits: `[T, E]` router logits.
        top_k: experts per token, `1 <= top_k <= min(E, 1024)`.
        renormalize: rescale the chosen probabilities to sum to 1 (Mixtral, Qwen-MoE with
            `norm_topk_prob`); DeepSeek-V2 keeps them as they are.

    Returns:
        `(weights, ids)`: `[T, top_k]` in `logits.dtype` (descending), int32 `[T, top_k]`.

    Raises:
        ValueError: `top_k` out of range.
    """
    if not 1 <= top_k <= min(logits.shape[-1], 1024):
        raise ValueError(f"top_k={top_k} must be within [1, min(E={logits.shape[-1]}, 1024)]")
    probs = logits.float().softmax(dim=-1)
    weights, ids = probs.topk(top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype), ids.to(torch.int32)
