"""W8A8 building blocks: per-token dynamic int8 quantisation and the int8 matmul with dequant.

- `dynamic_quant` follows `torch_npu.npu_dynamic_quant` (Ascend op-plugin
  docs/context/torch_npu-npu_dynamic_quant.md; aclnnDynamicQuant formula):
  `scale = rowmax(|x|) / 127`, `y = round(x / scale)` as int8, symmetric, one scale per token.
- `quant_matmul` follows `torch_npu.npu_quant_matmul` (docs/context/
  torch_npu-npu_quant_matmul.md): `out = (x1 @ x2) * scale * pertoken_scale (+ bias)`, with
  an int32 bias added before the dequantisation and a float bias after. The int8 product is
  exact: `torch._int_mm` where the device and shapes allow it, else an exact float emulation.
  The reference also dequantises to float32 (the CPU engine's default dtype); `npu_quant_matmul`
  does not.
"""

from __future__ import annotations

import torch

INT8_MAX = 127
QUANT_OUTPUT_DTYPES = (torch.float16, torch.bfloat16)
"""Float output dtypes of `torch_npu.npu_quant_matmul`."""
REFERENCE_OUTPUT_DTYPES = (*QUANT_OUTPUT_DTYPES, torch.float32)
"""Output dtypes of the reference `quant_matmul`."""


def dynamic_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-token int8 quantisation.

    Args:
        x: `[..., H]` float16/bfloat16 activations (at least 2-D).

    Returns:
        `(y, scale)`: int8 `[..., H]` and float32 `[...]` with `x ≈ y * scale[..., None]`.
        An all-zero row gets scale 0 and zeros.
    """
    xf = x.float()
    scale = xf.abs().amax(dim=-1) / INT8_MAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(-1)
    y = torch.round(xf / safe).clamp(-INT8_MAX - 1, INT8_MAX).to(torch.int8)
    return y, scale


def _int_mm_allowed(a: torch.Tensor, b: torch.Tensor) -> bool:
    """`torch._int_mm` runs on CPU for any 2-D shape; on CUDA it needs M > 16, K, N % 8 == 0."""
    if a.device.type == "cpu":
        return True
    if a.device.type == "cuda":
        return a.shape[0] > 16 and a.shape[1] % 8 == 0 and b.shape[1] % 8 == 0
    return False


def int8_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact int8 × int8 → int32 product of `[M, K]` and `[K, N]`.

    The emulation uses float64, which holds every partial sum exactly (|a·b| ≤ K * 2^14 < 2^53);
    devices without float64 compute it on the host.
    """
    if _int_mm_allowed(a, b):
        return torch._int_mm(a, b)
    host = a.device.type not in ("cpu", "cuda")
    a64 = (a.cpu() if host else a).double()
    b64 = (b.cpu() if host else b).double()
    return (a64 @ b64).to(torch.int32).to(a.device)


def quant_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    pertoken_scale: torch.Tensor,
    output_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """W8A8 linear layer: int8 activations × int8 weights, dequantised per channel and token.

    Args:
        x: int8 `[M, K]` quantised activations (from `dynamic_quant`).
        weight: int8 `[K, N]` quantised weights (`x2` layout of `npu_quant_matmul`).
        weight_scale: float32 `[N]` (or `[1]`) per-output-channel weight scale.
        pertoken_scale: float32 `[M]` activation scale from `dynamic_quant`.
        output_dtype: float16 or bfloat16 (float32 too in this reference).
        bias: `[N]`; int32 is added to the int32 product, float16/bfloat16/float32 to the
            dequantised result.

    Returns:
        `[M, N]` in `output_dtype`.

    Raises:
        ValueError: wrong dtypes or an unsupported output dtype.
    """
    if x.dtype != torch.int8 or weight.dtype != torch.int8:
        raise ValueError(f"x and weight must be int8, got {x.dtype} and {weight.dtype}")
    if output_dtype not in REFERENCE_OUTPUT_DTYPES:
        raise ValueError(
            f"output_dtype must be one of {REFERENCE_OUTPUT_DTYPES}, got {output_dtype}"
        )
    acc = int8_matmul(x, weight)
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias
    out = acc.float() * weight_scale.float() * pertoken_scale.float().unsqueeze(-1)
    if bias is not None and bias.dtype != torch.int32:
        out = out + bias.float()
    return out.to(output_dtype)
