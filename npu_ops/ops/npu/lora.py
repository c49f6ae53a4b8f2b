"""`npu` `grouped_lora`: Ascend's grouped matmul, twice (shrink by A, expand by B).

`torch_npu.npu_grouped_matmul(x, weight, *, bias=None, ..., group_list=None, split_item=0,
group_type=None, ...) -> list[Tensor]` — Ascend op-plugin docs/context/
torch_npu-npu_grouped_matmul.md: with `group_type=-1` (no split) and `split_item=0`, `x` and
`weight` are lists of equal length and output `i` is `x[i] @ weight[i]`, each weight `[k, n]`.
One launch computes every adapter group of the step (vllm-ascend's multi-LoRA path uses the
same kernel family for its SGMV shrink/expand).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from npu_ops.ops.npu.module import torch_npu


def grouped_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    starts: Sequence[int],
    stops: Sequence[int],
) -> torch.Tensor:
    """See `npu_ops.ops.lora.grouped_lora`."""
    out = y.clone()
    if not lora_a:
        return out
    gmm = torch_npu().npu_grouped_matmul
    xs = [x[s:e] for s, e in zip(starts, stops, strict=True)]
    shrunk = gmm(xs, [a.t() for a in lora_a], split_item=0, group_type=-1)
    expanded = gmm(list(shrunk), [b.t() for b in lora_b], split_item=0, group_type=-1)
    for delta, start, stop in zip(expanded, starts, stops, strict=True):
        out[start:stop] += delta
    return out
