"""`npu` implementations of RMSNorm, residual-add RMSNorm, rotary embedding and SwiGLU.

Signatures, argument names and layouts are those of the Ascend Extension for PyTorch API
reference:
- `torch_npu.npu_rms_norm(self, gamma, epsilon=1e-06) -> (y, rstd)`
  https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000860.html
- `torch_npu.npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06) -> (y, rstd, x)`
  torch_npu API reference page "torch_npu.npu_add_rms_norm" (Ascend Extension for PyTorch)
- `torch_npu.npu_rotary_mul(input, r1, r2, rotary_mode='half') -> Tensor`, 4-D `input`,
  `r1`/`r2` laid out `1S1D` for a `BSND` input: Ascend op-plugin
  docs/context/torch_npu-npu_rotary_mul.md
- `torch_npu.npu_swiglu(input, dim=-1) -> Tensor`
  https://www.hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000834.html
"""

from __future__ import annotations

import torch

from npu_ops.ops.npu.module import torch_npu


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`npu_rms_norm`; x `[..., H]`, weight `[H]` of x's dtype → `[..., H]`."""
    return torch_npu().npu_rms_norm(x, weight.to(x.dtype), epsilon=eps)[0]


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`npu_add_rms_norm(x1=x, x2=residual)` → `(yOut, xOut)` = (normed, new residual)."""
    normed, _rstd, summed = torch_npu().npu_add_rms_norm(
        x, residual, weight.to(x.dtype), epsilon=eps
    )
    return normed, summed


def rotary_embedding(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mode: str = "half"
) -> torch.Tensor:
    """`npu_rotary_mul` on the batch viewed as `BSND` = `[1, T, N, D]`, cos/sin as `1S1D`.

    `rotary_mode` is passed only for "interleave", so torch_npu releases whose
    `npu_rotary_mul` predates the argument (half mode only) still work.
    """
    tokens, dim = cos.shape
    r1 = cos.to(x.dtype).view(1, tokens, 1, dim)
    r2 = sin.to(x.dtype).view(1, tokens, 1, dim)
    extra = {} if mode == "half" else {"rotary_mode": mode}
    return torch_npu().npu_rotary_mul(x.unsqueeze(0), r1, r2, **extra).squeeze(0)


def swiglu(x: torch.Tensor) -> torch.Tensor:
    """`npu_swiglu(x, dim=-1)`; `[..., 2I]` → `[..., I]` (input must be contiguous)."""
    return torch_npu().npu_swiglu(x.contiguous(), dim=-1)
