"""KV-cache shape and sizing.

`bytes_per_block = num_layers * num_kv_heads * (k_head_dim + v_head_dim) * block_size *
dtype_bytes`, as in vLLM's `KVCacheSpec.page_size_bytes`. DeepSeek's multi-head latent attention
is expanded by transformers before attention, so its K head size is
`qk_nope_head_dim + qk_rope_head_dim` and its V head size `v_head_dim` (DeepSeek-V2 paper,
section 2.1).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KVCacheSpec:
    """Per-token KV geometry of a model.

    Attributes:
        num_layers: attention layers.
        num_kv_heads: K/V heads per layer.
        k_head_dim: K head size (elements).
        v_head_dim: V head size (elements).
        dtype: cache element type.
    """

    num_layers: int
    num_kv_heads: int
    k_head_dim: int
    v_head_dim: int
    dtype: torch.dtype

    @classmethod
    def from_config(
        cls, config: PretrainedConfig, dtype: torch.dtype, tensor_parallel_size: int = 1
    ) -> KVCacheSpec:
        """Read the geometry from a transformers config; heads are per tensor-parallel rank."""
        tp = tensor_parallel_size
        heads = config.num_attention_heads // tp
        if getattr(config, "qk_nope_head_dim", None):  # DeepSeek MLA, expanded per head
            return cls(
                config.num_hidden_layers,
                heads,
                config.qk_nope_head_dim + config.qk_rope_head_dim,
                config.v_head_dim,
                dtype,
            )
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // (heads * tp)
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        # fewer K/V heads than ranks: each rank holds one replicated head (Megatron GQA rule)
        kv_local = kv_heads // tp if kv_heads % tp == 0 else 1
        return cls(config.num_hidden_layers, kv_local, head_dim, head_dim, dtype)

    def bytes_per_token(self) -> int:
        """KV bytes one token occupies across all layers."""
        elem = torch.tensor([], dtype=self.dtype).element_size()
        return self.num_layers * self.num_kv_heads * (self.k_head_dim + self.v_head_dim) * elem

    def bytes_per_block(self, block_size: int) -> int:
        """KV bytes of one block of `block_size` tokens."""
        return self.bytes_per_token() * block_size


def allocate_kv_caches(
    spec: KVCacheSpec, num_blocks: int, block_size: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Allocate per-layer caches of shape `[num_blocks * block_size, num_kv_heads, head_dim]`."""
    slots = num_blocks * block_size
    return [
        (
            torch.zeros(slots, spec.num_kv_heads, spec.k_head_dim, dtype=spec.dtype, device=device),
            torch.zeros(slots, spec.num_kv_heads, spec.v_head_dim, dtype=spec.dtype, device=device),
        )
        for _ in range(spec.num_layers)
    ]
