"""The int8 arithmetic of ModelSlim's W8A8 layouts, shared by the quantiser and the loader.

Formulas (msModelSlim docs/en/feature_guide/traditional_quantization_v0/
quantized_weight_format.md, "W8A8 and W8A8S Quantization"):

    input_quant    = input_fp / input_scale + input_offset     (rounded, int8)
    output_quant   = input_quant @ weight.T + quant_bias       (int32)
    output_dequant = output_quant * deq_scale

`deq_scale` is float32 for bfloat16 models and, for float16 models, the float32 bit pattern
held in an int64 (what `npu_quant_matmul` takes with a float16 output; vllm-ascend
`scale_from_float_to_int64` in vllm_ascend/quantization/methods/w8a8_dynamic.py, msModelSlim's
`FakeLinearQuantizerOfW8A8.int64tofp32`). Weights are signed int8 in [-128, 127].
"""

from __future__ import annotations

import torch

INT8_MIN = -128
INT8_MAX = 127


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8 quantisation of a linear weight.

    Args:
        weight: `[out, in]` float.

    Returns:
        `(q, scale)`: int8 `[out, in]` in [-127, 127] and float32 `[out]` with
        `weight ≈ q * scale[:, None]`; an all-zero row gets scale 1.
    """
    w = weight.float()
    scale = w.abs().amax(dim=1) / INT8_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def dynamic_tensors(layer: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
    """A `W8A8_DYNAMIC` layer's tensors as ModelSlim stores them.

    Args:
        layer: the layer's checkpoint name (`<layer>.weight` is its float weight).
        weight: `[out, in]` float.

    Returns:
        `<layer>.weight` int8 `[out, in]` (symmetric per output channel),
        `<layer>.weight_scale` and `<layer>.weight_offset` (zeros) float32 `[out, 1]`.
    """
    q, scale = quantize_weight(weight)
    return {
        f"{layer}.weight": q,
        f"{layer}.weight_scale": scale[:, None],
        f"{layer}.weight_offset": torch.zeros_like(scale)[:, None],
    }


def activation_params(lo: float, hi: float) -> tuple[float, float]:
    """Asymmetric per-tensor int8 parameters for activations observed in `[lo, hi]`.

    The range is widened to contain 0, so zero is exact.

    Returns:
        `(input_scale, input_offset)` with `offset` an integer in [-128, 127] and
        `round(x / scale + offset)` mapping `[lo, hi]` onto `[-128, 127]`.
    """
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / (INT8_MAX - INT8_MIN) if hi > lo else 1.0
    offset = float(round(INT8_MIN - lo / scale))
    return scale, max(float(INT8_MIN), min(float(INT8_MAX), offset))


def quantize_per_tensor(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """Static activation quantisation: `round(x / scale + offset)` clamped to int8.

    Args:
        x: float activations, any shape.
        scale: float32 scalar tensor (`input_scale`).
        offset: float32 scalar tensor (`input_offset`).
    """
    y = torch.round(x.float() / scale + offset)
    return y.clamp(INT8_MIN, INT8_MAX).to(torch.int8)


def deq_scale_to_int64(scale: torch.Tensor) -> torch.Tensor:
    """float32 `[N]` -> int64 `[N]` holding each float's bit pattern (float16 models' layout)."""
    return scale.float().contiguous().view(torch.int32).to(torch.int64)


def deq_scale_from_int64(encoded: torch.Tensor) -> torch.Tensor:
    """Inverse of `deq_scale_to_int64`: the float32 values in the low 32 bits."""
    return encoded.to(torch.int32).contiguous().view(torch.float32)
