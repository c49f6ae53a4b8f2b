"""Routed experts with block-scaled FP8 or MXFP4 weights, in place of transformers' 3-D experts.

DeepSeek ships each routed expert as separate 2-D linears (V3: `experts.{e}.gate_proj|up_proj|
down_proj.weight` with `weight_scale_inv`; V4: `experts.{e}.w1|w3|w2.weight` with `.scale`),
which transformers merges into a layer's `gate_up_proj` `[E, 2I, H]` and `down_proj` `[E, H, I]`
(its `conversion_mapping.py`). This module keeps the per-expert codes and scales stacked along
the expert dimension, gate, up and down apart (an FP8 tile of `block_n` rows must not straddle the
gate/up seam when `I` is not a multiple of it), and runs the computation of
`engine.quantization.experts.W8A8DynamicExperts` with weight-only GEMMs: op `moe_dispatch`, per
expert `scaled_matmul` for gate and up (MXFP4: op `mxfp4_grouped_matmul` over every expert's rows
at once, Ascend 950's `npu_grouped_matmul`), the gated activation, the same for down, op
`moe_combine`. The formats' stacks are those of transformers' `FP8Experts` (integrations/
finegrained_fp8.py): FP8 `[E, N, K]` with `[E, ceil(N / bn), ceil(K / bk)]` scales; MXFP4
(`expert_dtype: fp4`) `[E, N, K / 2]` packed with `[E, N, ceil(K / 32)]` UE8M0 scales.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.quantization.experts import gated_activation
from engine.quantization.fp8_linear import Packed, scaled_matmul
from npu_ops.ops import active_ops

PROJECTIONS = ("gate", "up", "down")
"""The projections of an expert, in the order their stacks are passed."""


class BlockScaledExperts(nn.Module):
    """Routed experts over FP8 (or MXFP4) codes.

    Args:
        stacks: per projection in `PROJECTIONS`, `(codes, scales)` stacked over experts:
            gate and up `[E, I, H]` (MXFP4: `[E, I, H / 2]`), down `[E, H, I]` (`[E, H, I / 2]`).
        block_size: FP8 `(bn, bk)`, or None for MXFP4.
        hidden_dim: `H`.
        act_fn: the activation of the gate half.
        limit: clamp bound of the gate and up halves (DeepSeek-V4's `swiglu_limit`), or None.
    """

    def __init__(
        self,
        stacks: dict[str, tuple[torch.Tensor, torch.Tensor]],
        block_size: tuple[int, int] | None,
        hidden_dim: int,
        act_fn: nn.Module,
        limit: float | None,
    ) -> None:
        super().__init__()
        self.num_experts, self.intermediate_dim = (int(d) for d in stacks["gate"][0].shape[:2])
        self.hidden_dim = hidden_dim
        self.block_size = block_size
        self.codes = nn.ModuleDict({p: Packed(stacks[p][0]) for p in PROJECTIONS})
        self.scales = nn.ModuleDict({p: Packed(stacks[p][1]) for p in PROJECTIONS})
        self.act_fn = act_fn
        self.limit = limit
        self._ops = active_ops()

    def _matmul(self, x: torch.Tensor, proj: str, expert: int) -> torch.Tensor:
        codes, scales = self.codes[proj], self.scales[proj]
        assert isinstance(codes, Packed) and isinstance(scales, Packed)
        return scaled_matmul(
            self._ops, x, codes.get()[expert], scales.get()[expert], self.block_size
        )

    def _grouped(self, x: torch.Tensor, proj: str, sizes: torch.Tensor) -> torch.Tensor:
        codes, scales = self.codes[proj], self.scales[proj]
        assert isinstance(codes, Packed) and isinstance(scales, Packed)
        return self._ops.mxfp4_grouped_matmul(x, codes.get(), scales.get(), sizes)

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        """`[T, H]`, expert ids `[T, k]` and weights `[T, k]` -> `[T, H]` in the input dtype."""
        ids = top_k_index.to(torch.int32)
        ops = self._ops
        rows, expanded_row_idx, counts = ops.moe_dispatch(hidden_states, ids, self.num_experts + 1)
        out = rows.new_zeros(rows.shape[0], self.hidden_dim)
        if self.block_size is None:  # MXFP4: one grouped matmul per projection
            sizes = counts[: self.num_experts].to(torch.int64)
            routed = int(sizes.sum())
            x = rows[:routed]
            gate_up = torch.cat(
                [self._grouped(x, "gate", sizes), self._grouped(x, "up", sizes)], -1
            )
            h = gated_activation(gate_up, self.act_fn, self.limit)
            out[:routed] = self._grouped(h, "down", sizes)
            return ops.moe_combine(out, expanded_row_idx, top_k_weights, ids)
        start = 0
        for e, n in enumerate(counts.tolist()[: self.num_experts]):
            if n:
                x = rows[start : start + n]
                gate_up = torch.cat([self._matmul(x, "gate", e), self._matmul(x, "up", e)], -1)
                h = gated_activation(gate_up, self.act_fn, self.limit)
                out[start : start + n] = self._matmul(h, "down", e)
            start += n
        return ops.moe_combine(out, expanded_row_idx, top_k_weights, ids)

    def extra_repr(self) -> str:
        fmt = "MXFP4" if self.block_size is None else f"FP8 blocks {list(self.block_size)}"
        return (
            f"num_experts={self.num_experts}, hidden={self.hidden_dim}, "
            f"intermediate={self.intermediate_dim}, {fmt}"
        )
