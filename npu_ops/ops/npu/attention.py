"""`npu` attention: `npu_fusion_attention` for prefill and encoders, `npu_incre_flash_attention`
for decode.

- Prefill: `torch_npu.npu_fusion_attention(query, key, value, head_num, input_layout, ...,
  atten_mask, scale, ..., actual_seq_qlen, actual_seq_kvlen, sparse_mode)` with
  `input_layout="TND"` (varlen: `actual_seq_qlen`/`actual_seq_kvlen` are *cumulative* lengths)
  and `sparse_mode=3` (rightDownCausal), which takes the compressed causal mask: a 2048×2048
  bool upper triangle (`True` = masked). `key` and `value` must have the same shape, so a
  smaller V head (DeepSeek MLA) is zero-padded to the K head size and the output sliced back.
  Source: Ascend op-plugin docs/context/torch_npu-npu_fusion_attention.md.
- Encoder (bidirectional within segments): the same kernel in `TND` with `sparse_mode=0` and no
  `atten_mask` (every key of a segment visible), the segments' cumulative ends as both
  `actual_seq_qlen` and `actual_seq_kvlen` (required in `TND`); query/key/value float16,
  bfloat16 or float32. Source: Ascend Extension for PyTorch API reference, page
  "torch_npu.npu_fusion_attention",
  https://hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000850.html.
- Decode: `torch_npu.npu_incre_flash_attention(query, key, value, *, actual_seq_lengths,
  block_table, num_heads, scale_value, input_layout, num_key_value_heads, block_size)` with
  page attention: `input_layout="BSH"`, query `[B, 1, Nq*D]`, KV cache `(blocknum, blocksize,
  H = Nkv*D)`, int32 `block_table [B, max_blocks]`, host `actual_seq_lengths`; `block_size` a
  multiple of 16 for float16/bfloat16; query float16/bfloat16 on Atlas A2. Key and value must
  have the same shape, so K/V head sizes that differ fall back to the reference. Source:
  docs/context/torch_npu-npu_incre_flash_attention.md ("page attention使用限制").
- Decode over an 8-bit cache (`npu_ops.ops.kv_quant`: per-token-per-head scales): the kernel's
  int8 path (`antiquant_scale`, `antiquant_mode`) takes static per-channel scales (vLLM-Ascend's
  C8), not scales stored per cached token, so the blocks the step reads are dequantised on the
  device into a compact bfloat16/float16 cache (`kv_quant.dequantize_blocks`) that the same
  page-attention call reads.
"""

from __future__ import annotations

import functools
import itertools

import torch
import torch.nn.functional as F

from npu_ops.ops import attention as reference
from npu_ops.ops.encoder_attention import check_qkv, segment_lengths
from npu_ops.ops.kv_quant import dequantize_blocks, is_quantized
from npu_ops.ops.npu.module import torch_npu

COMPRESSED_MASK_SIZE = 2048  # sparse_mode 2/3/4 take an optimised 2048x2048 causal mask


@functools.cache
def causal_mask(device: torch.device) -> torch.Tensor:
    """The compressed causal mask of `npu_fusion_attention` for `sparse_mode=3`, on `device`."""
    n = COMPRESSED_MASK_SIZE
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(diagonal=1)


def prefill_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    q_lens: list[int],
    kv_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """Varlen causal attention (`TND`, rightDownCausal); shapes as the reference's."""
    reference.check_lens(q_lens, kv_lens, query.shape[0], key.shape[0])
    dk, dv = key.shape[-1], value.shape[-1]
    if dv < dk:
        value = F.pad(value, (0, dk - dv))
    out = torch_npu().npu_fusion_attention(
        query,
        key,
        value,
        head_num=query.shape[1],
        input_layout="TND",
        atten_mask=causal_mask(query.device),
        scale=scale,
        actual_seq_qlen=list(itertools.accumulate(q_lens)),
        actual_seq_kvlen=list(itertools.accumulate(kv_lens)),
        sparse_mode=3,
    )[0]
    return out[..., :dv]


def encoder_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Varlen bidirectional attention (`TND`, no mask); shapes as the reference's."""
    check_qkv(query, key, value)
    ends = list(itertools.accumulate(segment_lengths(cu_seqlens, query.shape[0])))
    return torch_npu().npu_fusion_attention(
        query,
        key,
        value,
        head_num=query.shape[1],
        input_layout="TND",
        scale=scale,
        actual_seq_qlen=ends,
        actual_seq_kvlen=ends,
        sparse_mode=0,
    )[0]


def paged_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Page-attention decode in the `BSH` layout; shapes as the reference's."""
    reference.check_paged_inputs(query, key_cache, block_table, seq_lens)
    if is_quantized(key_cache):
        (key_cache, value_cache), block_table = dequantize_blocks(
            (key_cache, value_cache), block_table, query.dtype
        )
    if key_cache.shape[-1] != value_cache.shape[-1]:
        return reference.paged_decode_attention(
            query, key_cache, value_cache, block_table, seq_lens, scale
        )
    batch, num_heads, head_dim = query.shape
    num_blocks, block_size, num_kv_heads, _ = key_cache.shape
    out = torch_npu().npu_incre_flash_attention(
        query.reshape(batch, 1, num_heads * head_dim),
        key_cache.view(num_blocks, block_size, num_kv_heads * head_dim),
        value_cache.view(num_blocks, block_size, num_kv_heads * head_dim),
        actual_seq_lengths=seq_lens.tolist(),
        block_table=block_table,
        num_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        scale_value=scale,
        input_layout="BSH",
        block_size=block_size,
    )
    return out.view(batch, num_heads, head_dim)
