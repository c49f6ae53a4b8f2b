"""KV-cache shape and sizing.

`bytes_per_block = num_layers * num_kv_heads * (k_head_dim + v_head_dim) * block_size *
dtype_bytes`, as in vLLM's `KVCacheSpec.page_size_bytes`.

DeepSeek's multi-head latent attention (MLA) is cached in its latent form (DeepSeek-V2 paper,
arXiv 2405.04434, section 2.1.2; vLLM's `MLAAttentionSpec`): per token and layer the compressed
`c_kv` (`kv_lora_rank` elements, after `kv_a_layernorm`) and the rotary key `k_pe`
(`qk_rope_head_dim` elements, after RoPE), one "head" shared by every query head. The spec then
has `num_kv_heads = 1`, `k_head_dim = kv_lora_rank`, `v_head_dim = qk_rope_head_dim` and
`latent = True`, so the byte formula above reads `num_layers * (kv_lora_rank + qk_rope_head_dim)
* dtype_bytes` per token: DeepSeek-V2-Lite (27 layers, 512 + 64, bfloat16) 31,104 bytes instead
of 276,480 expanded (16 heads x (192 + 128)). The latent has no head dimension, so under tensor
parallel every rank holds all of it for its layers (replicated, as vLLM does); the ranks split
the query heads and with them the `kv_b_proj` slices `engine.mla_attention` absorbs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KVCacheSpec:
    """Per-token KV geometry of a model (of one tensor-parallel rank).

    Attributes:
        num_layers: attention layers.
        num_kv_heads: K/V heads per layer (1 for an MLA latent cache).
        k_head_dim: K head size (elements); `kv_lora_rank` for an MLA latent cache.
        v_head_dim: V head size (elements); `qk_rope_head_dim` for an MLA latent cache.
        dtype: cache element type.
        latent: the per-layer cache pair is MLA's `(c_kv, k_pe)` rather than `(K, V)`; the same
            on every tensor-parallel rank.
        name: the kind, in logs and plans (`kv` for the one kind of a standard model).
        compress_ratio: tokens per cached entry (DeepSeek-V4's compressed kinds: 4, 128);
            1 for per-token kinds.
        sliding: the kind is read only for the last tokens of a sequence and lives in a
            hybrid cache's sliding-window group (`engine.hybrid_block_manager`).
    """

    num_layers: int
    num_kv_heads: int
    k_head_dim: int
    v_head_dim: int
    dtype: torch.dtype
    latent: bool = False
    name: str = "kv"
    compress_ratio: int = 1
    sliding: bool = False
    hybrid = False  # one kind (DeepSeek-V4's several: `engine.deepseek_v4.cache.HybridKVSpec`)

    @classmethod
    def mla(
        cls, num_layers: int, kv_lora_rank: int, qk_rope_head_dim: int, dtype: torch.dtype
    ) -> KVCacheSpec:
        """The latent cache of DeepSeek MLA: `c_kv` and `k_pe` per token and layer (any rank)."""
        return cls(num_layers, 1, kv_lora_rank, qk_rope_head_dim, dtype, latent=True)

    @classmethod
    def from_config(
        cls, config: PretrainedConfig, dtype: torch.dtype, tensor_parallel_size: int = 1
    ) -> KVCacheSpec:
        """Read the geometry from a transformers config; heads are per tensor-parallel rank
        (an MLA latent cache has none and is the same on every rank)."""
        tp = tensor_parallel_size
        if getattr(config, "kv_lora_rank", None):  # DeepSeek MLA
            return cls.mla(
                config.num_hidden_layers, config.kv_lora_rank, config.qk_rope_head_dim, dtype
            )
        heads = config.num_attention_heads // tp
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // (heads * tp)
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        # fewer K/V heads than ranks: each rank holds one replicated head (Megatron GQA rule)
        kv_local = kv_heads // tp if kv_heads % tp == 0 else 1
        return cls(config.num_hidden_layers, kv_local, head_dim, head_dim, dtype)

    def entry_bytes(self) -> int:
        """Bytes of one cached entry across all layers (one token's, unless compressed)."""
        elem = torch.tensor([], dtype=self.dtype).element_size()
        return self.num_layers * self.num_kv_heads * (self.k_head_dim + self.v_head_dim) * elem

    def bytes_per_token(self) -> float:
        """KV bytes one token occupies across all layers: `entry_bytes / compress_ratio`
        (an int for per-token kinds)."""
        if self.compress_ratio == 1:
            return self.entry_bytes()
        return self.entry_bytes() / self.compress_ratio

    def bytes_per_block(self, block_size: int) -> int:
        """KV bytes of one block of `block_size` tokens (`block_size // compress_ratio`
        entries)."""
        return self.entry_bytes() * (block_size // self.compress_ratio)

    def sliding_pool_bytes(self, block_size: int) -> int:
        """Bytes set aside before the growing cache is sized: none for one kind (see
        `HybridKVSpec.sliding_pool_bytes`)."""
        return 0

    def describe(self) -> str:
        """The geometry in words, for the start-up log line."""
        if self.name != "kv":
            per = f" per {self.compress_ratio} tokens" if self.compress_ratio > 1 else ""
            width = self.k_head_dim + self.v_head_dim
            return f"{self.name} {self.num_layers} layers x {width}{per}"
        if self.latent:
            return (
                f"MLA latent, {self.num_layers} layers x (c_kv {self.k_head_dim} + k_pe "
                f"{self.v_head_dim}), replicated on every rank"
            )
        return (
            f"{self.num_layers} layers x {self.num_kv_heads} kv heads x (K {self.k_head_dim} + "
            f"V {self.v_head_dim})"
        )
