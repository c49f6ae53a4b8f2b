"""Modules that replace a layer by its sharded form and combine ranks' partial results.

Megatron-LM's scheme (Shoeybi et al., 2019, section 3): column-parallel layers split their
output features across ranks and need no communication; a row-parallel layer consumes the
column-parallel shard and all-reduces its partial sums once. Expert parallel keeps a contiguous
range of experts per rank; every rank routes all tokens, computes only its own experts, and the
all-reduce sums the experts' contributions (dispatch/combine expressed as one all-reduce).
W8A8 layers are sharded in their int8 form and reduced the same way (`RowParallelQuantLinear`,
`ReducedExperts` around `engine.quantization.experts.W8A8DynamicExperts`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from engine.parallel.groups import tensor_group


def _all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` in place over this rank's tensor-parallel group (`engine.parallel.groups`;
    the default group's call is kept argument-free)."""
    group = tensor_group()
    if group is None:
        dist.all_reduce(tensor)
    else:
        dist.all_reduce(tensor, group=group)


class RowParallelLinear(nn.Module):
    """A linear layer whose input features are split across ranks.

    Args:
        inner: the layer with this rank's weight columns `[out, in / world]`; its bias, if any,
            is added once, after the all-reduce.
    """

    def __init__(self, inner: nn.Linear) -> None:
        super().__init__()
        self.weight = inner.weight
        self.bias = inner.bias
        self.out_features, self.in_features = (int(n) for n in inner.weight.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., in / world]` -> `[..., out]`, summed over ranks."""
        return self.reduce(self.partial(x))

    def partial(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's partial sum `[..., out]` (a LoRA update adds its own partial here, so
        one all-reduce sums both: `engine.lora.layer`)."""
        return nn.functional.linear(x, self.weight)

    def reduce(self, partial: torch.Tensor) -> torch.Tensor:
        """Sum the ranks' partials (in place) and add the bias once."""
        _all_reduce(partial)
        return partial if self.bias is None else partial + self.bias


class RowParallelQuantLinear(RowParallelLinear):
    """A W8A8 linear (`engine.quantization.linear`) whose input features are split across ranks.

    The all-reduce sums dequantised partials: each rank's int8 GEMM is dequantised with the
    per-output-channel scales (whole on every rank) and its own activation scale (per token for
    `W8A8_DYNAMIC`, computed on the rank's input slice; the per-tensor static scale for `W8A8`).
    The bias (float, or static W8A8's int32 `quant_bias`) is in rank 0's partial only, inside its
    `quant_matmul`, as vllm-ascend's W8A8 methods apply it on TP rank 0 only.

    Args:
        inner: the W8A8 layer after `keep_inputs(cols, keep_bias=rank == 0)`.
    """

    def __init__(self, inner: nn.Module) -> None:
        nn.Module.__init__(self)  # no float weight of its own: `inner` holds the int8 shard
        self.inner = inner
        self.bias = None  # in rank 0's partial already
        self.out_features, self.in_features = int(inner.out_features), int(inner.in_features)

    def partial(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's partial sum `[..., out]` from its input slice `[..., in / world]`."""
        return self.inner(x)


class ReducedExperts(nn.Module):
    """A routed-experts module whose output is a partial sum per rank.

    Used both for tensor parallel inside each expert (intermediate size split) and for expert
    parallel (experts split). For expert parallel, global expert ids are mapped to this rank's
    local ids; experts of other ranks map to the module's skip id (`num_experts`, which the
    transformers experts implementations ignore).

    Args:
        experts: the HF experts module (or `W8A8DynamicExperts`), already holding only this
            rank's slice.
        first_expert: global id of this rank's first expert (0 for tensor parallel).
        num_local: experts held here.
        remap: whether to remap ids (expert parallel).
    """

    def __init__(self, experts: nn.Module, first_expert: int, num_local: int, remap: bool) -> None:
        super().__init__()
        self.experts = experts
        self.first_expert = first_expert
        self.num_local = num_local
        self.remap = remap

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        """`[tokens, hidden]`, routing `[tokens, k]` -> `[tokens, hidden]`, summed over ranks."""
        if self.remap:
            local = top_k_index - self.first_expert
            mine = (local >= 0) & (local < self.num_local)
            top_k_index = torch.where(mine, local, torch.full_like(local, self.num_local))
        out = self.experts(hidden_states, top_k_index, top_k_weights)
        _all_reduce(out)
        return out
