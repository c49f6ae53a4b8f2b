"""MoE blocks through the op registry: routers (gating) and routed experts.

The HF MoE block stays (it calls `gate`, then `experts`, then adds the shared experts); its two
children are swapped by `engine.fused_layers.use_fused_layers`:

- routers → op `moe_topk_softmax` (`npu_moe_gating_top_k_softmax`: Qwen3-MoE, DeepSeek-V2
  "greedy") or op `moe_grouped_topk` (`npu_moe_gating_top_k`: DeepSeek-V3 with
  `norm_topk_prob`), computing what transformers' `Qwen3MoeTopKRouter`,
  `DeepseekV2TopkRouter` and `DeepseekV3TopkRouter` compute;
- routed experts (3-D `gate_up_proj` `[E, 2I, H]` and `down_proj` `[E, H, I]` parameters) →
  op `moe_dispatch` (`npu_moe_init_routing`), one GEMM pair per expert over its contiguous rows
  with op `swiglu` between, then op `moe_combine` (`npu_moe_finalize_routing`).

Expert ids equal to `num_experts` mean "not on this rank" (expert parallel, see
`engine.parallel.layers.ReducedExperts`); their rows are dispatched to a last, skipped group and
contribute zeros, as transformers' experts implementations skip them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from npu_ops.ops import active_ops
from npu_ops.ops.moe_gating import check_grouping

EXPERTS = frozenset({"Qwen3MoeExperts", "DeepseekV2Experts", "DeepseekV3Experts"})
"""transformers' 3-D routed-experts classes (SiLU-gated)."""


class RegistryExperts(nn.Module):
    """Routed experts: dispatch, per-expert SwiGLU MLP, weighted combine.

    Args:
        experts: the HF experts module (its parameters are shared).
    """

    def __init__(self, experts: nn.Module) -> None:
        super().__init__()
        self.num_experts = int(experts.num_experts)
        self.gate_up_proj = experts.gate_up_proj  # [E, 2I, H]
        self.down_proj = experts.down_proj  # [E, H, I]
        self._ops = active_ops()

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        """`[T, H]`, expert ids `[T, k]` and weights `[T, k]` -> `[T, H]` in the input dtype."""
        ids = top_k_index.to(torch.int32)
        rows, expanded_row_idx, counts = self._ops.moe_dispatch(
            hidden_states, ids, self.num_experts + 1
        )
        out = rows.new_zeros(rows.shape[0], self.down_proj.shape[1])
        start = 0
        for expert, n in enumerate(counts.tolist()[: self.num_experts]):
            if n:
                x = F.linear(rows[start : start + n], self.gate_up_proj[expert])
                out[start : start + n] = F.linear(self._ops.swiglu(x), self.down_proj[expert])
            start += n
        return self._ops.moe_combine(out, expanded_row_idx, top_k_weights, ids)


class RegistrySoftmaxRouter(nn.Module):
    """Softmax top-k routing through op `moe_topk_softmax`.

    Args:
        router: `Qwen3MoeTopKRouter` (renormalised when `norm_topk_prob`, logits in the
            activations' dtype) or `DeepseekV2TopkRouter` with `topk_method="greedy"` (float32
            logits, weights times `routed_scaling_factor`).
    """

    def __init__(self, router: nn.Module) -> None:
        super().__init__()
        self.weight = router.weight  # [E, H]
        self.top_k = int(router.top_k)
        self.renormalize = bool(getattr(router, "norm_topk_prob", False))
        self.scaling = getattr(router, "routed_scaling_factor", None)
        self.float_logits = self.scaling is not None  # DeepSeek-V2 routes in float32
        self._ops = active_ops()

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`[..., H]` -> `(logits [T, E], weights [T, k], int32 ids [T, k])`."""
        h = hidden_states.reshape(-1, self.weight.shape[1])
        if self.float_logits:
            logits = F.linear(h.float(), self.weight.float())
        else:
            logits = F.linear(h, self.weight)
        weights, ids = self._ops.moe_topk_softmax(logits, self.top_k, self.renormalize)
        if self.scaling is not None:
            weights = weights * self.scaling
        return logits, weights, ids


class RegistryGroupedRouter(nn.Module):
    """DeepSeek-V3 sigmoid routing with grouped top-k, through op `moe_grouped_topk`.

    Args:
        router: a `DeepseekV3TopkRouter` with `norm_topk_prob` (the op always renormalises).

    Raises:
        ValueError: the router's grouping breaks the op's constraints (`check_grouping`).
    """

    def __init__(self, router: nn.Module) -> None:
        super().__init__()
        self.weight = router.weight  # [E, H], float32
        self.bias = router.e_score_correction_bias
        self.top_k = int(router.top_k)
        self.num_groups = int(router.num_group)
        self.topk_groups = int(router.topk_group)
        self.scaling = float(router.routed_scaling_factor)
        check_grouping(self.weight.shape[0], self.top_k, self.num_groups, self.topk_groups)
        self._ops = active_ops()

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`[..., H]` -> `(float32 logits [T, E], weights [T, k], int32 ids [T, k])`."""
        h = hidden_states.reshape(-1, self.weight.shape[1])
        logits = F.linear(h.float(), self.weight.float())
        weights, ids = self._ops.moe_grouped_topk(
            logits, self.bias, self.top_k, self.num_groups, self.topk_groups, self.scaling
        )
        return logits, weights, ids


def registry_router(router: nn.Module) -> nn.Module | None:
    """Our router for an HF router, or None where no registry op computes it."""
    kind = type(router).__name__
    if kind == "Qwen3MoeTopKRouter":
        return RegistrySoftmaxRouter(router)
    if kind == "DeepseekV2TopkRouter" and router.topk_method == "greedy":
        return RegistrySoftmaxRouter(router)
    if kind == "DeepseekV3TopkRouter" and router.norm_topk_prob:
        try:
            return RegistryGroupedRouter(router)
        except ValueError:
            return None  # grouping the NPU op cannot take: the HF router stays
    return None
