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

An 8-bit cache (`engine.kv_cache_dtype` `int8` / `fp8_e4m3`; layout in `npu_ops.ops.kv_quant`)
stores each row of `D` elements as `D` one-byte codes plus a float16 scale per token and head:
`num_layers * num_kv_heads * (k_head_dim + 2 + v_head_dim + 2)` bytes per token. Against a
bfloat16 cache that is `(D + 2) / (2 * D)`: SmolLM2-135M (30 layers, 3 kv heads, D = 64)
11,880 bytes instead of 23,040 (51.6 %); D = 128 models 50.8 %; DeepSeek MLA (512 + 64) 580
bytes a layer instead of 1,152 (50.3 %).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

from npu_ops.ops.kv_quant import SCALE_BYTES, storage_dtype

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KVCacheSpec:
    """Per-token KV geometry of a model (of one tensor-parallel rank).

    Attributes:
        num_layers: attention layers.
        num_kv_heads: K/V heads per layer (1 for an MLA latent cache).
        k_head_dim: K head size (elements); `kv_lora_rank` for an MLA latent cache.
        v_head_dim: V head size (elements); `qk_rope_head_dim` for an MLA latent cache.
        dtype: the model's dtype, and the cache's element type when `kv_cache_dtype` is
            `auto`.
        latent: the per-layer cache pair is MLA's `(c_kv, k_pe)` rather than `(K, V)`; the same
            on every tensor-parallel rank.
        name: the kind, in logs and plans (`kv` for the one kind of a standard model).
        compress_ratio: tokens per cached entry (DeepSeek-V4's compressed kinds: 4, 128);
            1 for per-token kinds.
        sliding: the kind is read only for the last tokens of a sequence and lives in a
            hybrid cache's sliding-window group (`engine.hybrid_block_manager`).
        kv_cache_dtype: `auto` (cache in `dtype`), or `int8` / `fp8_e4m3`: 8-bit codes with a
            float16 scale per token and head (`npu_ops.ops.kv_quant`).
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
    kv_cache_dtype: str = "auto"
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

    @property
    def quantized(self) -> bool:
        """The cache holds 8-bit codes with per-token-per-head scales."""
        return self.kv_cache_dtype != "auto"

    def storage(self) -> tuple[torch.dtype, int, int]:
        """`(element dtype, K row width, V row width)` of the allocated cache tensors: the
        model dtype and the head sizes, or the 8-bit storage dtype and each head size plus the
        scale's bytes (`npu_ops.ops.kv_quant`).

        Raises:
            ValueError: an unknown `kv_cache_dtype`.
        """
        if not self.quantized:
            return self.dtype, self.k_head_dim, self.v_head_dim
        k_width, v_width = self.k_head_dim + SCALE_BYTES, self.v_head_dim + SCALE_BYTES
        return storage_dtype(self.kv_cache_dtype), k_width, v_width

    def entry_bytes(self) -> int:
        """Bytes of one cached entry across all layers (one token's, unless compressed)."""
        dtype, k_width, v_width = self.storage()
        elem = torch.tensor([], dtype=dtype).element_size()
        return self.num_layers * self.num_kv_heads * (k_width + v_width) * elem

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
        """The geometry in words, for the start-up log line (with the cache dtype, except for
        the kinds of a hybrid cache, which `HybridKVSpec.describe` lists)."""
        if self.name != "kv":
            return self._geometry()
        return f"{self._geometry()}, cache {self._cache_dtype_name()}"

    def _cache_dtype_name(self) -> str:
        if self.quantized:
            return f"{self.kv_cache_dtype} + float16 scale per token and head"
        return str(self.dtype).removeprefix("torch.")

    def _geometry(self) -> str:
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
