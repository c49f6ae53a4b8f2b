"""Quantised weights: W8A8 checkpoints in msModelSlim's layout (Ascend's quantiser), as
vllm-ascend loads them, and weight-only int4 applied at load time.

- `description`: `quant_model_description.json`, the per-tensor type map.
- `int8`: the quantisation arithmetic of the layout.
- `linear`: the W8A8 / W8A8_DYNAMIC layers, computing through the op registry.
- `loader`: `apply_quantization`, called by `engine.model_loader.load_model`.
- `quantizer`: `quantize_checkpoint`, behind `ascend-router quantize`.
- `weight_int4`: group-wise int4 linears (`EngineConfig.weight_quantization="int4"`; exact for
  GGUF Q4_1 files).
"""

from __future__ import annotations

from engine.quantization.description import QUANT_DESCRIPTION_FILE
from engine.quantization.loader import apply_quantization

__all__ = ["QUANT_DESCRIPTION_FILE", "apply_quantization"]
