"""Reference of `grouped_lora`: the LoRA updates of a flattened batch whose rows run under
different adapters, as two GEMMs over the step's adapters stacked along the rank (S-LoRA's
"segmented gather matrix-vector", Sheng et al. 2023; Punica's SGMV, Chen et al. 2023, computed
densely: each row's shrink is masked to its own adapter's rank columns)."""

from __future__ import annotations

import torch


def grouped_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    row_ids: torch.Tensor,
    col_ids: torch.Tensor,
    col_spans: torch.Tensor,
) -> torch.Tensor:
    """`y` plus each row's own adapter's low-rank update. This reference returns a new tensor;
    an implementation may write the result into `y` and return it (the `cpu` kernel does), so
    callers pass a `y` of their own that they do not read again.

    `h = x @ lora_a^T` holds every adapter's shrink of every row; the entries of a column whose
    adapter is not the row's are zeroed, then `y + h @ lora_b` adds each row's expansion. Both
    GEMMs run in the adapters' dtype (on CPUs without the `cpu` kernel `LoraLinear` keeps them in
    float32, as small bfloat16 GEMMs are 2-3x slower there), the sum is returned in `y`'s.
    Rows whose id matches no column (the base model's) are left as they are, so a step pays
    for the adapters stacked (those present in it), not for every adapter loaded.

    Args:
        y: `[T, out]` the base linear's output.
        x: `[T, in]` the linear's input.
        lora_a: `[R, in]` the step's adapters' A matrices stacked along the rank (ranks may
            differ).
        lora_b: `[R, out]` their B matrices, transposed, stacked, the scaling folded in; row `c`
            is zero outside `col_spans[c]`.
        row_ids: `[T]` int64, the adapter of each row (one matching no column: base model).
        col_ids: `[R]` int64, the adapter of each rank column.
        col_spans: `[R, 2]` int64, the output columns `[start, stop)` that rank column `c`
            writes (its slice of a merged projection). This reference computes densely over
            `lora_b`'s zeros; an implementation may skip them (the `cpu` kernel does).

    Returns:
        `[T, out]` in `y.dtype`.
    """
    mask = row_ids[:, None] != col_ids[None, :]
    h = torch.mm(x.to(lora_a.dtype), lora_a.t()).masked_fill_(mask, 0)
    return y.to(h.dtype, copy=True).addmm_(h, lora_b).to(y.dtype)
