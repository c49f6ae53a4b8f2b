"""Which KV geometry, cache tensors and block manager a model gets: DeepSeek-V4's hybrid kinds in
two block pools (`engine.deepseek_v4.cache`, `engine.hybrid_block_manager`), or one kind in one
pool (`engine.kv_cache`, `engine.block_manager`). The engine and `ascend-router plan` both ask
here."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from transformers import PretrainedConfig

from configs.engine_config import EngineConfig
from engine.block_manager import BlockManager
from engine.deepseek_v4.cache import HybridKVSpec
from engine.hybrid_block_manager import HybridBlockManager
from engine.kv_cache import KVCacheSpec

AnyKVSpec = KVCacheSpec | HybridKVSpec
"""A model's KV geometry: one kind, or DeepSeek-V4's hybrid kinds."""


def allocate_kv_caches(
    spec: AnyKVSpec, num_blocks: int, block_size: int, device: torch.device
) -> list[Any]:
    """Allocate per-layer caches of shape `[num_blocks * block_size, num_kv_heads, head_dim]`:
    `(K, V)`, or for an MLA latent cache `(c_kv [slots, 1, kv_lora_rank], k_pe [slots, 1,
    qk_rope_head_dim])`; a hybrid spec's own per-layer tuples (`HybridKVSpec.allocate`)."""
    if isinstance(spec, HybridKVSpec):
        return spec.allocate(num_blocks, block_size, device)
    slots = num_blocks * block_size
    return [
        (
            torch.zeros(slots, spec.num_kv_heads, spec.k_head_dim, dtype=spec.dtype, device=device),
            torch.zeros(slots, spec.num_kv_heads, spec.v_head_dim, dtype=spec.dtype, device=device),
        )
        for _ in range(spec.num_layers)
    ]


def kv_spec(
    hf_config: PretrainedConfig, dtype: torch.dtype, tensor_parallel_size: int, config: EngineConfig
) -> AnyKVSpec:
    """The model's KV geometry per rank: DeepSeek-V4's hybrid kinds, with its sliding-window pool
    sized for `config` (`HybridKVSpec.sliding_blocks_for`), or the one kind of the others.

    Raises:
        ValueError: a DeepSeek-V4 `block_size` that is not a multiple of its compress ratios.
    """
    if hf_config.model_type != "deepseek_v4":
        return KVCacheSpec.from_config(hf_config, dtype, tensor_parallel_size)
    spec = HybridKVSpec.from_config(hf_config, dtype)
    spec.check_block_size(config.block_size)
    sliding = spec.sliding_blocks_for(
        config.max_num_seqs, config.max_num_batched_tokens, config.block_size
    )
    return replace(spec, sliding_blocks=sliding)


def block_manager_for(spec: AnyKVSpec, num_blocks: int, config: EngineConfig) -> BlockManager:
    """The block manager of `spec`: `num_blocks` blocks (of the full pool, for a hybrid spec,
    whose sliding pool has its `sliding_blocks`)."""
    if isinstance(spec, HybridKVSpec):
        return HybridBlockManager(
            num_blocks,
            config.block_size,
            spec.sliding_blocks,
            spec.span,
            config.enable_prefix_caching,
        )
    return BlockManager(num_blocks, config.block_size, config.enable_prefix_caching)
