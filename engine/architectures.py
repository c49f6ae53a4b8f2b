"""The architectures (`model_type`s) the engine serves, and the refusal of every other one.

The engine runs unmodified `transformers` model classes with attention plugged in through the
attention registry (`engine.attention`) or swapped for ours (`engine.fused_layers`), over a
paged cache of one K/V pair (or one MLA latent) per token and layer (`engine.kv_cache`). An
architecture whose attention needs another cache (sliding-window, compressed or indexed keys)
fails in its first prefill on our cache's shapes (DeepSeek-V4: an `IndexError` in
`engine.attention`) or, worse, attends to the wrong keys without a word; so a checkpoint is
refused when its config is read, before any weight loads
(`engine.model_loader.load_config`: the engine, its draft model, `ascend-router plan` and
`ascend-router quantize` all read configs there).

A `model_type` is supported when its tiny checkpoint (`fixtures.tiny_checkpoints.FAMILY_CONFIGS`,
or for an image or audio model `fixtures.tiny_multimodal.MULTIMODAL_FAMILIES`) matches
transformers' greedy output through the engine (`tests/engine/test_families.py`,
`tests/engine/test_multimodal_engine.py`); `tests/engine/test_architectures.py` keeps the lists
equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import PretrainedConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

SUPPORTED_MODEL_TYPES: dict[str, str] = {
    "llama": "K/V attention, rotate-half rotary (SmolLM2, also from GGUF)",
    "qwen2": "K/V attention with q/k/v biases",
    "qwen3": "K/V attention with per-head q/k norms",
    "qwen3_moe": "Qwen3 attention, softmax top-k MoE (engine.fused_moe)",
    "phi3": "K/V attention from one fused qkv projection",
    "deepseek_v2": "MLA cached as its latent (engine.mla_attention), softmax MoE",
    "deepseek_v3": "MLA as V2, grouped sigmoid MoE, optional MTP layer",
    "qwen2_5_vl": (
        "Qwen2 language model with M-RoPE positions (engine.multimodal.families) on K/V "
        "attention; images through its own vision tower"
    ),
    "qwen2_audio": "Qwen2 language model on K/V attention; audio through its Whisper-style encoder",
    "deepseek_v4": (
        "sliding-window + compressed/indexed shared-KV attention on the hybrid cache "
        "(engine.deepseek_v4), hash and sqrt-softplus MoE, hyper-connections"
    ),
}
"""`model_type` -> why the engine can serve it (the attention path that handles it)."""

REFUSED_MODEL_TYPES: dict[str, str] = {
    "deepseek_v32": (
        "its DeepSeek Sparse Attention picks each query's keys with a lightning indexer, which "
        "needs an indexer-key cache and top-k sparse attention we do not have"
    ),
    "deepseek_v41": (
        "this transformers version has no model class for it, and the engine builds every model "
        "from transformers' classes"
    ),
}
"""`model_type`s refused with a reason of their own (`deepseek_v41` even where transformers
does not know it, so the message says why rather than "upgrade transformers")."""

_UNVERIFIED = (
    "no tiny checkpoint of it is checked against transformers (fixtures.tiny_checkpoints), so "
    "its attention and KV cache are unverified"
)


def check_architecture(
    config: PretrainedConfig | Mapping[str, Any], source: str | Path | None = None
) -> None:
    """Refuse a checkpoint whose `model_type` the engine does not serve.

    Args:
        config: the loaded config, or `config.json` as read (so that a `model_type` transformers
            cannot build a config for is refused with its own reason).
        source: the config's file, put at the head of the message.

    Raises:
        ValueError: (one line) naming the `model_type`, its causal-LM class, why it is not
            served (`REFUSED_MODEL_TYPES`, else that it is unverified) and the supported ones.
    """
    if isinstance(config, Mapping):
        model_type, archs = config.get("model_type"), config.get("architectures")
    else:
        model_type, archs = config.model_type, config.architectures
    if model_type in SUPPORTED_MODEL_TYPES:
        return
    arch: str | None = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(str(model_type))
    if isinstance(archs, (list, tuple)) and archs:
        arch = str(archs[0])
    named = f"model_type {model_type!r}" + (f" ({arch})" if arch else "")
    reason = REFUSED_MODEL_TYPES.get(str(model_type), _UNVERIFIED)
    prefix = f"{source}: " if source is not None else ""
    raise ValueError(
        f"{prefix}{named} is not supported by this engine: {reason}. "
        f"Supported: {', '.join(sorted(SUPPORTED_MODEL_TYPES))}"
    )
