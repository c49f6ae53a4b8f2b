"""LoRA updates that give each row the same bits whatever shares its step (`batch_invariant`).

Used where op `grouped_lora` is not our CPU kernel (which is batch invariant by its own order of
arithmetic, `npu_ops/cpu_kernels/grouped_lora.cpp`, and serves both settings). The reference
stacks the step's adapters along the rank and runs two GEMMs over all of the step's rows, and a
GEMM's summation order is the library's choice, made
from the shapes and the thread count. Measured on this CPU build (torch 2.13, MKL 2024.2), fp32:
a row of `x @ A` differs in its last bits between a one-row call (torch's GEMV) and a call of
two or more rows, and with `in` = 1536 (SmolLM2's down_proj) between one and two threads
from 16 rows on. A LoRA request decoding alone is a one-row step on one thread
(`single_thread_max_tokens`), so its logits moved when another request joined its step, as a
user saw (issue #32); padding that one row to two removed the divergence of that report, but
not the thread and row-count dependence.

Here every LoRA row is computed by elementwise multiplies and adds only: the shrink
`h = x A^T` as `x * A` broadcast to `[n, r, in]` summed over `in`, the expand `delta = h B^T`
as `h * B` `[n, out, r]` summed over `r`, each sum by `fixed_order_sum`, whose tree of additions
depends only on the length summed. IEEE 754 rounds each elementwise multiply and add correctly
(IEEE 754-2008 section 4.3: every operation is "performed as if it first produced an
intermediate result correct to infinite precision and with unbounded range, and then rounded"),
and an elementwise kernel computes each element from its own operands alone, so a row's bits
depend on its own input, its adapter's weights and that length, never on how many rows there
are, which adapters share the step, the thread count (`single_thread_max_tokens`) or
vectorisation.
Every adapter's rows are computed apart from the other adapters' (the per-adapter rank, not the
step's stacked one), as Thinking Machines' batch-invariant kernels fix each output's reduction
order whatever the batch (He et al. 2025, "Defeating Nondeterminism in LLM Inference").

It costs more kernel launches than the two GEMMs (about 20 small ops per adapter in the step
per wrapped linear) and `[rows, r, in]` / `[rows, out, r]` temporaries, bounded by computing at
most `CHUNK_ROWS` rows at a time: SmolLM2 bf16 + int4, 2 cores, a decode step of lora-a, -b, -c
and a base row took about 80 ms against 40 through the GEMMs, 16 rows of two adapters about 110
against 55, a 4 x 128-token prefill 234 against 120 ms (a shared host; base-only steps are not
affected).
"""

from __future__ import annotations

import torch

CHUNK_ROWS = 64
"""Rows computed together: bounds the `[rows, out, r]` temporaries (64 x 3072 x 16 fp32 is
12 MiB); rows are independent, so the chunking changes no bits."""


def fixed_order_sum(p: torch.Tensor) -> torch.Tensor:
    """Sum over the last dimension by a tree of elementwise additions fixed by its length.

    While the length `n` is even, halves are added (`p[..., i] + p[..., i + n/2]`); at an odd
    length the last element is added into the first. No reduction kernel is used, so nothing
    depends on the other dimensions' sizes or the thread count.

    Args:
        p: `[..., n]`, `n` >= 1; changed in place only when `n` is odd and `p` is not a view of
            the caller's (pass a temporary).

    Returns:
        `[...]` in `p.dtype`.
    """
    n = p.shape[-1]
    while n > 1:
        if n % 2:
            p[..., :1] += p[..., n - 1 : n]
            n -= 1
            p = p[..., :n]
        half = n // 2
        p = p[..., :half] + p[..., half:n]
        n = half
    return p[..., 0]


def add_rows_update(
    out: torch.Tensor,
    y: torch.Tensor,
    x: torch.Tensor,
    rows: slice | torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
) -> None:
    """Write `y[rows] + (x[rows] a^T) b^T` into `out[rows]`, each row on its own.

    Args:
        out: `[T, out]` the layer's result, written at `rows` only.
        y: `[T, out]` the base layer's output.
        x: `[T, in]` the layer's input.
        rows: the step's rows under this adapter: a range (the scheduler keeps a sequence's
            rows together) or `[n]` int64 indices.
        a: `[r, in]` the adapter's A (its slices' stacked), in the compute dtype.
        b: `[out, r]` its B (each slice's in its own output rows, the scaling folded in).
    """
    if isinstance(rows, slice):
        for start in range(rows.start, rows.stop, CHUNK_ROWS):
            s = slice(start, min(start + CHUNK_ROWS, rows.stop))
            out[s] = _updated(y[s], x[s], a, b)
        return
    for chunk in rows.split(CHUNK_ROWS):
        new = _updated(y.index_select(0, chunk), x.index_select(0, chunk), a, b)
        out.index_copy_(0, chunk, new.to(out.dtype))


def _updated(y: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`y + (x a^T) b^T` for `[n, in]` rows `x`, in `a`'s dtype."""
    h = fixed_order_sum(x.to(a.dtype)[:, None, :] * a)  # [n, r]
    delta = fixed_order_sum(h[:, None, :] * b)  # [n, out], a temporary of ours
    return delta.add_(y)
