"""Sizes of the op preflight's inputs (`ascend-router ops-check`).

`OpShapes` holds them; its defaults are Qwen2.5-7B's attention and MLP (28 query heads,
4 K/V heads of 128, hidden 3584, intermediate 18944), DeepSeek-V3's router (256 experts in 8
groups, 4 groups and 8 experts per token, scaling 2.5) and DeepSeek-V3's MLA (hidden 7168, query
LoRA 1536, latent 512, head dims 128 + 64) at 32 heads, one rank's share of 128 over 4 ranks,
and DeepSeek-V4-Flash's attention (64 heads of 512 over one shared K=V head, sliding window 128,
the ratio-4 compressor with overlapping windows, an indexer of 64 heads of 128 keeping 512
entries; its `config.json`), whose queries are the last three tokens of each `decode_lens`
sequence in a paged cache laid out as the engine's (`engine.deepseek_v4.step_indices`).
`OpShapes.for_model` takes them from a model's checkpoint config or `shape` section instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers import PretrainedConfig


@dataclass(frozen=True)
class OpShapes:
    """Sizes of the preflight inputs (see the module docstring for the defaults' source)."""

    dtype: torch.dtype = torch.bfloat16
    hidden_size: int = 3584
    intermediate_size: int = 18944
    num_heads: int = 28
    num_kv_heads: int = 4
    k_head_dim: int = 128
    v_head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    block_size: int = 128
    num_experts: int = 256
    top_k: int = 8
    num_groups: int = 8
    topk_groups: int = 4
    routed_scaling_factor: float = 2.5
    softmax_experts: int = 64
    softmax_top_k: int = 6
    num_tokens: int = 64
    prefill_q_lens: tuple[int, ...] = (256, 96)
    prefill_kv_lens: tuple[int, ...] = (256, 160)  # the second continues a cached prefix
    decode_lens: tuple[int, ...] = (300, 17, 128, 1000)
    mla_hidden_size: int = 7168
    mla_heads: int = 32
    q_lora_rank: int | None = 1536  # None: no query LoRA (DeepSeek-V2-Lite)
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v4_heads: int = 64
    v4_head_dim: int = 512
    v4_sliding_window: int = 128
    v4_compress_ratio: int = 4
    v4_index_heads: int = 64
    v4_index_head_dim: int = 128
    v4_index_topk: int = 512

    @classmethod
    def for_model(
        cls,
        dtype: torch.dtype,
        *,
        num_kv_heads: int,
        k_head_dim: int,
        v_head_dim: int,
        block_size: int,
        hf_config: PretrainedConfig | None = None,
    ) -> OpShapes:
        """Shapes of one model: K/V geometry always, the rest from its config when known.

        Without a checkpoint config the query heads are not known; they are taken as
        `4 × num_kv_heads` when the K/V heads are few (grouped-query attention) and equal to
        them otherwise (multi-head, or DeepSeek MLA expanded).
        """
        heads = num_kv_heads * 4 if num_kv_heads <= 8 else num_kv_heads
        shapes = replace(
            cls(),
            dtype=dtype,
            num_heads=heads,
            num_kv_heads=num_kv_heads,
            k_head_dim=k_head_dim,
            v_head_dim=v_head_dim,
            block_size=block_size,
        )
        if hf_config is None:
            return shapes
        c = hf_config
        updates: dict[str, Any] = {
            "hidden_size": getattr(c, "hidden_size", shapes.hidden_size),
            "num_heads": getattr(c, "num_attention_heads", shapes.num_heads),
            "intermediate_size": getattr(c, "moe_intermediate_size", None)
            or getattr(c, "intermediate_size", shapes.intermediate_size),
            "rms_norm_eps": getattr(c, "rms_norm_eps", shapes.rms_norm_eps),
            "rope_theta": getattr(c, "rope_theta", shapes.rope_theta) or shapes.rope_theta,
        }
        experts = getattr(c, "n_routed_experts", None) or getattr(c, "num_experts", None)
        top_k = getattr(c, "num_experts_per_tok", None)
        if experts and top_k:
            if getattr(c, "scoring_func", "softmax") == "sigmoid":
                updates |= {
                    "num_experts": experts,
                    "top_k": top_k,
                    "num_groups": getattr(c, "n_group", 1) or 1,
                    "topk_groups": getattr(c, "topk_group", 1) or 1,
                    "routed_scaling_factor": getattr(c, "routed_scaling_factor", 1.0),
                }
            else:
                updates |= {"softmax_experts": experts, "softmax_top_k": top_k}
        if getattr(c, "kv_lora_rank", None):
            updates |= {
                "mla_hidden_size": c.hidden_size,
                "mla_heads": c.num_attention_heads,
                "q_lora_rank": c.q_lora_rank,
                "kv_lora_rank": c.kv_lora_rank,
                "qk_nope_head_dim": c.qk_nope_head_dim,
                "qk_rope_head_dim": c.qk_rope_head_dim,
            }
        if getattr(c, "index_topk", None) and getattr(c, "compress_rates", None):
            updates |= {  # DeepSeek-V4 (transformers `DeepseekV4Config`)
                "v4_heads": c.num_attention_heads,
                "v4_head_dim": c.head_dim,
                "v4_sliding_window": c.sliding_window,
                "v4_compress_ratio": min(int(r) for r in dict(c.compress_rates).values()),
                "v4_index_heads": c.index_n_heads,
                "v4_index_head_dim": c.index_head_dim,
                "v4_index_topk": c.index_topk,
            }
        return replace(shapes, **updates)
