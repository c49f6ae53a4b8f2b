"""Shared helpers of the op tests."""

from __future__ import annotations

import torch

from operate.ops_check.shapes import OpShapes


def small_shapes(dtype: torch.dtype = torch.float32, **overrides: object) -> OpShapes:
    """Small but structurally complete shapes (GQA, two block sizes' worth, grouped routing,
    DeepSeek-V4 windows that start before the sequence and indexers that must choose)."""
    fields: dict[str, object] = {
        "dtype": dtype,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_heads": 4,
        "num_kv_heads": 2,
        "k_head_dim": 16,
        "v_head_dim": 16,
        "block_size": 16,
        "num_experts": 32,
        "top_k": 4,
        "num_groups": 4,
        "topk_groups": 2,
        "routed_scaling_factor": 2.5,
        "softmax_experts": 8,
        "softmax_top_k": 2,
        "num_tokens": 12,
        "prefill_q_lens": (7, 3),
        "prefill_kv_lens": (7, 9),
        "decode_lens": (5, 17, 33),
        "mla_hidden_size": 32,
        "mla_heads": 4,
        "q_lora_rank": 24,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 8,
        "v4_heads": 4,
        "v4_head_dim": 16,
        "v4_sliding_window": 8,
        "v4_compress_ratio": 4,
        "v4_index_heads": 4,
        "v4_index_head_dim": 8,
        "v4_index_topk": 3,
    }
    fields.update(overrides)
    return OpShapes(**fields)  # type: ignore[arg-type]
