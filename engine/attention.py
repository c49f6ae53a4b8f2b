"""Paged attention plugged into `transformers` through its attention-function registry.

The model runner flattens every scheduled sequence into one batch of `T` tokens (batch
dimension 1, no padding). Before the forward pass it publishes an `AttentionMetadata` (in the
step's `engine.forward_context.ForwardContext`); each attention layer then writes its new K/V
into the paged cache at `slot_mapping` and attends over the context gathered through the block
tables. Decoding sequences (one new token each) and
prefill chunks each attend as a padded batch of their own: every sequence over its own context,
gathered block by block (whole blocks, padded to the longest block table, the padding masked),
prefill queries padded to the longest chunk and masked causally. Nobody pays for another
sequence's context: attending eight 128-token prompts as one masked 1024-token batch spent
0.51 s of a 1.2 s SmolLM2 prefill step in attention.

Decode attention is the registry op `paged_decode_attention` (`npu_ops.ops`): on CPU our AVX512
kernel, which reads each sequence's K/V in place through its block table (no gathered copy;
float32 scores and sums, the same order whatever the batch); `npu_incre_flash_attention` on
Ascend; on other platforms torch's SDPA over the gathered context. The whole cache is passed as
`[num_blocks, block_size, kvH, d]`.

An 8-bit cache (`engine.kv_cache_dtype`; `npu_ops.ops.kv_quant`) is written quantised, one
float16 scale per token and head beside the codes, and read dequantised: by the decode op, and
for prefill here, as each sequence's context is gathered.

Registration follows transformers' `AttentionInterface` (transformers
`modeling_utils.AttentionInterface`, "Customizing attention function" in its docs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from engine.attention_metadata import AttentionMetadata
from engine.forward_context import current_forward_context
from npu_ops.ops.kv_quant import dequantize_kv, is_quantized, write_cache

ATTENTION_NAME = "ascend_paged"


def paged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Attention over the paged KV cache.

    Args:
        module: the HF attention module (its `layer_idx` selects the cache).
        query: `[1, num_heads, T, head_dim]`.
        key: `[1, num_kv_heads, T, head_dim]` (after rotary embedding).
        value: `[1, num_kv_heads, T, v_head_dim]`.
        attention_mask: ignored; the mask comes from `AttentionMetadata`.
        scaling: softmax scale (defaults to `head_dim ** -0.5`).

    Returns:
        `([1, T, num_heads, v_head_dim], None)`, the layout transformers expects.
    """
    ctx = current_forward_context()
    assert ctx is not None, "paged_attention called outside forward_context"
    meta = ctx.attention
    k_cache, v_cache = meta.kv_caches[module.layer_idx]
    write_cache(k_cache, meta.slot_mapping, key[0].transpose(0, 1))
    write_cache(v_cache, meta.slot_mapping, value[0].transpose(0, 1))
    gqa = query.shape[1] != key.shape[1]
    out = query.new_empty(query.shape[:3] + (value.shape[-1],))  # [1, H, T, v_head_dim]
    if meta.decode_rows.numel():
        q = query[0][:, meta.decode_rows].transpose(0, 1)  # [D, H, d]
        blocks = k_cache.shape[0] // meta.block_size
        decoded = meta.ops.paged_decode_attention(
            q,
            k_cache.view(blocks, meta.block_size, *k_cache.shape[1:]),
            v_cache.view(blocks, meta.block_size, *v_cache.shape[1:]),
            meta.decode_block_tables,
            meta.decode_seq_lens,
            query.shape[-1] ** -0.5 if scaling is None else scaling,
        )  # [D, H, v_d]
        out[0][:, meta.decode_rows] = decoded.transpose(0, 1)
    if meta.prefill_rows.numel():
        out[0][:, meta.prefill_rows] = _prefill_attention(
            query[0][:, meta.prefill_rows], k_cache, v_cache, meta, scaling, gqa
        )
    return out.transpose(1, 2), None


def gather_context(
    cache: torch.Tensor, tables: torch.Tensor, width: int, dtype: torch.dtype
) -> torch.Tensor:
    """Each sequence's context, block by block.

    Args:
        cache: `[num_slots, kvH, dim]`, or an 8-bit cache `[num_slots, kvH, dim + 2]`
            (dequantised here).
        tables: `[S, B]` block tables; `width` = `B * block_size`.

    Returns:
        Contiguous `[S, kvH, width, dim]` in `dtype`.
    """
    seqs, blocks = tables.shape
    picked = cache.view(-1, width // blocks, *cache.shape[1:]).index_select(0, tables.flatten())
    if is_quantized(cache):
        picked = dequantize_kv(picked, dtype)
    ctx = picked.view(seqs, width, cache.shape[1], -1).permute(0, 2, 1, 3)
    return ctx.to(dtype, memory_format=torch.contiguous_format)


def _prefill_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scaling: float | None,
    gqa: bool,
) -> torch.Tensor:
    """Prefill chunks, each causal over its own paged context, as one padded SDPA batch.

    Args:
        query: `[H, P, d]`, the prefill tokens' queries (`P` tokens of `S` sequences).

    Returns:
        `[H, P, v_d]` in the query's dtype.
    """
    heads, _, head_dim = query.shape
    seqs, _, q_max, width = meta.prefill_mask.shape
    padded = query.new_zeros(seqs * q_max, heads, head_dim)
    padded[meta.prefill_pad_index] = query.transpose(0, 1)
    q = padded.view(seqs, q_max, heads, head_dim).transpose(1, 2)  # [S, H, Q, d]
    k = gather_context(k_cache, meta.prefill_block_tables, width, query.dtype)
    v = gather_context(v_cache, meta.prefill_block_tables, width, query.dtype)
    o = F.scaled_dot_product_attention(
        q, k, v, attn_mask=meta.prefill_mask, scale=scaling, enable_gqa=gqa
    )  # [S, H, Q, v_d]
    o = o.transpose(1, 2).reshape(seqs * q_max, heads, -1)[meta.prefill_pad_index]
    return o.transpose(0, 1)


AttentionInterface.register(ATTENTION_NAME, paged_attention)
