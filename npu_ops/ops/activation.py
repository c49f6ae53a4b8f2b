"""Rotary position embedding and SwiGLU: pure-torch references.

Rotary follows `torch_npu.npu_rotary_mul` (Ascend op-plugin docs,
docs/context/torch_npu-npu_rotary_mul.md): `out = r1 * x + r2 * rotate(x)` where `r1 = cos`,
`r2 = sin`, and `rotate` is "half" (`cat(-x2, x1)` of the two halves, the GPT-NeoX / Llama
layout used by transformers' `rotate_half`) or "interleave" (`(-x[1::2], x[::2])` interleaved,
the GPT-J layout). SwiGLU follows `torch_npu.npu_swiglu`
(https://www.hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000834.html):
`swiglu(x) = silu(A) * B` with `A, B` the two halves of `x` along the last dimension.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ROTARY_MODES = ("half", "interleave")


def rotate(x: torch.Tensor, mode: str) -> torch.Tensor:
    """The rotated companion of `x` in `npu_rotary_mul`'s formula (`x_new`).

    Raises:
        ValueError: unknown mode.
    """
    if mode == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    if mode == "interleave":
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)
    raise ValueError(f"rotary mode {mode!r} is not one of {ROTARY_MODES}")


def rotary_embedding(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mode: str = "half"
) -> torch.Tensor:
    """Apply rotary position embedding to a flattened token batch.

    Args:
        x: `[T, N, D]` queries or keys (T tokens, N heads, D head size, D even).
        cos: `[T, D]`, cosine of each token's rotation angles, already laid out for `mode`
            (for "half", `cat(freqs, freqs)` as transformers builds it; for "interleave",
            each frequency repeated twice in place).
        sin: `[T, D]`, the matching sines.
        mode: "half" or "interleave".

    Returns:
        `[T, N, D]` in `x.dtype`.
    """
    c = cos.to(x.dtype).unsqueeze(1)
    s = sin.to(x.dtype).unsqueeze(1)
    return c * x + s * rotate(x, mode)


def swiglu(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU over the last dimension (the gate/up halves of a fused `gate_up_proj` output).

    Args:
        x: `[..., 2 * I]`; the first half is the gate `A`, the second the up projection `B`.

    Returns:
        `[..., I]`, `silu(A) * B`, in `x.dtype`.
    """
    a, b = x.chunk(2, dim=-1)
    return F.silu(a) * b
