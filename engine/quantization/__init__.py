"""Quantised weights: W8A8 checkpoints in msModelSlim's layout (Ascend's quantiser), as
vllm-ascend loads them, and weight-only int4 applied at load time.

- `description`: `quant_model_description.json`, the per-tensor type map.
- `int8`: the quantisation arithmetic of the layout.
- `linear`: the W8A8 / W8A8_DYNAMIC layers, computing through the op registry.
- `experts`: W8A8_DYNAMIC routed experts (per-expert int8 weights stacked as transformers'
  3-D experts).
- `tensor_files`: reading a checkpoint's tensors by name, with checks.
- `checkpoint_names`: checkpoint tensor names -> model tensors, by transformers' own renaming.
- `loader`: `apply_quantization`, called by `engine.model_loader.load_model`.
- `deepseek_v4`: ModelSlim's DeepSeek-V4 W8A8 layout (which tensors are int8, in which names).
- `quantizer`: `quantize_checkpoint`, behind `ascend-router quantize`.
- `weight_int4`: group-wise int4 linears (`EngineConfig.weight_quantization="int4"`; exact for
  GGUF Q4_1 files).
"""

from __future__ import annotations

from engine.quantization.description import QUANT_DESCRIPTION_FILE
from engine.quantization.loader import apply_quantization

__all__ = ["QUANT_DESCRIPTION_FILE", "apply_quantization"]
