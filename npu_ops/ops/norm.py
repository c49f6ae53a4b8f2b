"""RMSNorm, fused residual-add + RMSNorm and LayerNorm: pure-torch references.

`RmsNorm(x) = x / sqrt(mean(x^2) + eps) * gamma` over the last dimension, as in the torch_npu
docs of `torch_npu.npu_rms_norm` (Ascend Extension for PyTorch API reference,
https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000860.html) and
`torch_npu.npu_add_rms_norm` (same reference, page "torch_npu.npu_add_rms_norm";
test: gitcode.com/Ascend/op-plugin test/test_custom_ops/test_npu_add_rms_norm.py). Statistics
are taken in float32 and the result is returned in the input dtype, as transformers' LlamaRMSNorm
and the op-plugin test do.
"""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension.

    Args:
        x: `[..., H]`, float16/bfloat16/float32.
        weight: `[H]` (gamma), same dtype as `x`.
        eps: added to the mean square before the square root.

    Returns:
        `[..., H]` in `x.dtype`.
    """
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * rstd * weight.float()).to(x.dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add followed by RMSNorm, as one decoder layer boundary does.

    Args:
        x: `[..., H]`, the sub-layer output (`x1` in the torch_npu docs).
        residual: `[..., H]`, the residual stream (`x2`), same dtype as `x`.
        weight: `[H]` (gamma).
        eps: added to the mean square.

    Returns:
        `(normed, summed)`: `RmsNorm(x + residual)` and `x + residual`, both `[..., H]` in
        `x.dtype`; `summed` is the new residual stream. The sum is rounded to `x.dtype` before
        the norm, as `npu_add_rms_norm` does (its `xOut` output feeds its `yOut`).
    """
    summed = x + residual
    return rms_norm(summed, weight, eps), summed


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """LayerNorm over the last dimension: `(x - mean) / sqrt(var + eps) * gamma + beta`.

    The biased variance, as `torch.nn.LayerNorm` (PyTorch docs) and Whisper's encoder use it.

    Args:
        x: `[..., H]`, float16/bfloat16/float32.
        weight: `[H]` (gamma).
        bias: `[H]` (beta), or None for none.
        eps: added to the variance before the square root.

    Returns:
        `[..., H]` in `x.dtype`; statistics in float32.
    """
    xf = x.float()
    mean = xf.mean(dim=-1, keepdim=True)
    var = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
    out = (xf - mean) * torch.rsqrt(var + eps) * weight.float()
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)
