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
    qk_rope_head_dim])`; a hybrid spec's own per-layer tuples (`HybridKVSpec.allocate`). An 8-bit
    cache's rows are `head_dim + 2` bytes wide (`KVCacheSpec.storage`, `npu_ops.ops.kv_quant`)."""
    if isinstance(spec, HybridKVSpec):
        return spec.allocate(num_blocks, block_size, device)
    slots = num_blocks * block_size
    dtype, k_width, v_width = spec.storage()
    return [
        (
            torch.zeros(slots, spec.num_kv_heads, k_width, dtype=dtype, device=device),
            torch.zeros(slots, spec.num_kv_heads, v_width, dtype=dtype, device=device),
        )
        for _ in range(spec.num_layers)
    ]


def kv_spec(
    hf_config: PretrainedConfig, dtype: torch.dtype, tensor_parallel_size: int, config: EngineConfig
) -> AnyKVSpec:
    """The model's (a vision/audio model's: its language model's) KV geometry per rank:
    DeepSeek-V4's hybrid kinds, with its sliding-window pool sized for `config`
    (`HybridKVSpec.sliding_blocks_for`), or the one kind of the others, in
    `config.kv_cache_dtype`.

    Raises:
        ValueError: a DeepSeek-V4 `block_size` that is not a multiple of its compress ratios, or
            an 8-bit `kv_cache_dtype` for DeepSeek-V4 (its compressed caches are kept in the
            model dtype).
    """
    hf_config = hf_config.get_text_config()  # a vision/audio model's language model
    if hf_config.model_type != "deepseek_v4":
        one = KVCacheSpec.from_config(hf_config, dtype, tensor_parallel_size)
        return replace(one, kv_cache_dtype=config.kv_cache_dtype)
    if config.kv_cache_dtype != "auto":
        raise ValueError(
            f"engine.kv_cache_dtype={config.kv_cache_dtype} is not supported for DeepSeek-V4 "
            "(its hybrid caches are kept in the model dtype); set kv_cache_dtype: auto"
        )
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
