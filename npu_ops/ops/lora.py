"""Reference of `grouped_lora`: LoRA updates of a flattened batch whose tokens are grouped by
adapter (S-LoRA's "segmented gather matrix-vector", Sheng et al. 2023; Punica's SGMV, Chen et
al. 2023)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def grouped_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    starts: Sequence[int],
    stops: Sequence[int],
) -> torch.Tensor:
    """`y` plus each group's low-rank update on its rows (a new tensor; `y` is not changed).

    For group `g`, rows `starts[g]:stops[g]` get `(x[rows] @ lora_a[g].T) @ lora_b[g].T`. Rows of
    no group (the base model's tokens) are left as they are, so a step pays for the groups
    present, not for every adapter loaded.

    Args:
        y: `[T, out]` the base linear's output (may be a column slice of a wider output).
        x: `[T, in]` the linear's input.
        lora_a: per group `[r_g, in]` (ranks may differ between groups).
        lora_b: per group `[out, r_g]`, the scaling already folded in.
        starts: per group, its first row (python ints, known when the step is built).
        stops: per group, one past its last row; groups do not overlap.

    Returns:
        `[T, out]` in `y.dtype`.
    """
    out = y.clone()
    for a, b, start, stop in zip(lora_a, lora_b, starts, stops, strict=True):
        out[start:stop] += (x[start:stop] @ a.t()) @ b.t()
    return out
