"""8-bit KV caches: per-token-per-head quantisation with the scale stored inline.

A quantised cache holds, for every cached token and K/V head, the `D` one-byte codes of its
vector followed by that vector's scale as one float16 (2 bytes): a tensor
`[slots, heads, D + 2]` of 1-byte elements, so block moves, prefix sharing and preemption handle
it exactly as a float cache. The storage dtype names the codes:

- `int8` (`torch.int8` storage): symmetric, `scale = amax(|x|) / 127`,
  `code = round(x / scale)`, the formula of `torch_npu.npu_dynamic_quant` (Ascend op-plugin
  docs/context/torch_npu-npu_dynamic_quant.md; `npu_ops.ops.quant.dynamic_quant`) applied to
  each head's row;
- `fp8_e4m3` (`torch.uint8` storage, the bytes of `torch.float8_e4m3fn`): `scale = amax(|x|) /
  448` (448 the largest e4m3fn value), `code = fp8(x / scale)`. vLLM scales its fp8 cache per
  tensor (`--kv-cache-dtype fp8`, `k_scale`/`v_scale` per layer, docs "Quantized KV Cache");
  this cache scales per token and head, as for int8, and needs no calibration.

Dequantisation is `code * scale`. The scale is rounded to float16 before the codes are computed
from it, so `code * scale` reproduces `x` to within half a code step.

Why per token and head, not the Ascend C8 layout: vLLM-Ascend's C8 cache
(`vllm_ascend/quantization` `AscendW8A8C8KVCacheMethod`, `Qwen2C8KVCacheMethod`) quantises with
static per-channel scales (`key_antiquant_scale`, `[num_kv_heads * head_size]`) calibrated
offline and shipped in a W8A8C8 checkpoint (`kv_cache_type: C8`), which
`npu_fused_infer_attention_score` / `npu_incre_flash_attention` take as `antiquant_scale`.
Checkpoints without calibrated scales cannot use it; dynamic per-token scales need none. The
`npu` attention implementations therefore dequantise the blocks a step reads
(`dequantize_blocks`) and run the fused kernel on the result.

Bytes per token and K/V head: `D + 2` against bfloat16's `2 * D`: `(D + 2) / (2 * D)`, 51.6 %
at `D = 64`, 50.8 % at `D = 128`.
"""

from __future__ import annotations

import torch

KV_CACHE_DTYPES: dict[str, torch.dtype] = {"int8": torch.int8, "fp8_e4m3": torch.uint8}
"""Config name (`engine.kv_cache_dtype`) -> storage dtype of the quantised cache."""
SCALE_DTYPE = torch.float16
SCALE_BYTES = 2
"""Bytes of the per-token-per-head scale stored after the codes."""
_CODE_MAX = {torch.int8: 127.0, torch.uint8: float(torch.finfo(torch.float8_e4m3fn).max)}


def storage_dtype(kv_cache_dtype: str) -> torch.dtype:
    """The storage dtype of a quantised cache named `kv_cache_dtype` (`int8`, `fp8_e4m3`).

    Raises:
        ValueError: an unknown name.
    """
    try:
        return KV_CACHE_DTYPES[kv_cache_dtype]
    except KeyError:
        raise ValueError(
            f"unknown kv_cache_dtype {kv_cache_dtype!r}; choose auto, {', '.join(KV_CACHE_DTYPES)}"
        ) from None


def is_quantized(cache: torch.Tensor) -> bool:
    """Whether `cache` is a packed 8-bit cache (the module docstring's layout)."""
    return cache.dtype in _CODE_MAX


def quantize_kv(x: torch.Tensor, storage: torch.dtype) -> torch.Tensor:
    """Quantise each `D`-vector of `x` with its own scale, packed with it.

    Args:
        x: `[..., D]` float K, V or latent rows (`D` even).
        storage: `torch.int8` (int8 codes) or `torch.uint8` (fp8 e4m3 codes).

    Returns:
        `[..., D + 2]` in `storage`: the codes, then the float16 scale's two bytes. An all-zero
        row gets scale 0 and zero codes.
    """
    xf = x.float()
    scale = (xf.abs().amax(dim=-1, keepdim=True) / _CODE_MAX[storage]).to(SCALE_DTYPE)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale)).float()
    y = xf / safe
    if storage == torch.int8:
        codes = y.round().clamp(-128, 127).to(torch.int8)
    else:
        bound = _CODE_MAX[storage]
        codes = y.clamp(-bound, bound).to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.cat((codes, scale.view(storage)), dim=-1)


def dequantize_kv(packed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`code * scale` of every packed row (`quantize_kv`'s inverse up to rounding).

    Args:
        packed: `[..., D + 2]` int8 or uint8 (see `quantize_kv`).
        dtype: the output dtype.

    Returns:
        `[..., D]` in `dtype`.
    """
    width = packed.shape[-1] - SCALE_BYTES
    codes = packed[..., :width]
    scale = packed[..., width:].contiguous().view(SCALE_DTYPE).float()  # [..., 1]
    values = codes.float() if packed.dtype == torch.int8 else codes.view(torch.float8_e4m3fn)
    return (values.float() * scale).to(dtype)


def write_cache(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
    """Write `rows` at `slots` of `cache`, quantising them when the cache is 8-bit.

    Args:
        cache: `[num_slots, heads, W]`: float (`W = D`) or packed (`W = D + 2`).
        slots: `[T]` int64 slot indices.
        rows: `[T, heads, D]` float.
    """
    if is_quantized(cache):
        cache.index_copy_(0, slots, quantize_kv(rows, cache.dtype))
    else:
        cache.index_copy_(0, slots, rows.to(cache.dtype))


def dequantize_blocks(
    caches: tuple[torch.Tensor, ...], block_table: torch.Tensor, dtype: torch.dtype
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """The blocks a paged decode step reads, dequantised into compact float caches.

    Each row of `block_table` gets its own copy of its blocks (a shared prefix block is
    dequantised once per row), and the new table points at them: no host sync, so it runs
    inside a captured graph too.

    Args:
        caches: packed `[num_blocks, block_size, heads, W + 2]` caches (K and V, or MLA's
            `c_kv` and `k_pe`).
        block_table: int32 `[B, max_blocks]`.
        dtype: the float dtype of the result.

    Returns:
        `(float caches [B * max_blocks, block_size, heads, W], int32 table [B, max_blocks])`.
    """
    rows, width = block_table.shape
    picked = block_table.flatten().long()
    table = torch.arange(rows * width, dtype=torch.int32, device=block_table.device)
    return tuple(dequantize_kv(c[picked], dtype) for c in caches), table.view(rows, width)
