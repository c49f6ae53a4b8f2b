"""Paged attention plugged into `transformers` through its attention-function registry.

The model runner flattens every scheduled sequence into one batch of `T` tokens (batch
dimension 1, no padding). Before the forward pass it publishes an `AttentionMetadata`; each
attention layer then writes its new K/V into the paged cache at `slot_mapping` and attends over
the context gathered through the block tables. Decoding sequences (one new token each) attend as
a batch of their own, each over its own context gathered block by block (whole blocks, padded to
the longest block table, the padding masked); prefill chunks attend over their concatenated
contexts with a mask that keeps sequences apart and causal. Splitting the two keeps a decode
batch from paying for every other sequence's context.

Decode attention is written out as two batched matmuls around a float32 softmax, grouping the
query heads that share a KV head (GQA as in transformers' `repeat_kv`: query head `h` reads KV
head `h // (num_heads // num_kv_heads)`), over K/V gathered into contiguous `[D, kvH, L, d]`.
For one query token per sequence this beats `scaled_dot_product_attention` on CPU (bfloat16,
batch 16, 192-token contexts, SmolLM2's 9/3 heads: 1.9 ms → 0.46 ms per layer). The matmuls run
in float32 for batches of up to `_FLOAT32_DECODE_MAX_BATCH` sequences and in the model dtype
above (per layer, batch 1 × 192 tokens: 0.10 ms float32 against 0.16 ms bfloat16; batch 32:
1.44 ms against 0.81 ms).

Registration follows transformers' `AttentionInterface` (transformers
`modeling_utils.AttentionInterface`, "Customizing attention function" in its docs).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

ATTENTION_NAME = "ascend_paged"
_FLOAT32_DECODE_MAX_BATCH = 4


@dataclass(frozen=True)
class AttentionMetadata:
    """Per-step inputs of paged attention.

    Attributes:
        slot_mapping: `[T]` int64, cache slot of each new token.
        kv_caches: per layer, `(k_cache, v_cache)` of shape
            `[num_blocks * block_size, num_kv_heads, head_dim]` (K and V head dims may differ).
        decode_rows: `[D]` int64, batch positions of the decode tokens (one per sequence).
        decode_block_tables: `[D, B]` int64, each decode sequence's block table, padded to the
            longest (`B` blocks) with block 0.
        decode_mask: `[D, 1, 1, B * block_size]` bool, True on the sequence's context tokens.
        prefill_rows: `[P]` int64, batch positions of the prefill-chunk tokens.
        prefill_slots: `[C]` int64, context slots of every prefill sequence, concatenated.
        prefill_mask: `[1, 1, P, C]` bool, True where a query may attend a context token.
    """

    slot_mapping: torch.Tensor
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
    decode_rows: torch.Tensor
    decode_block_tables: torch.Tensor
    decode_mask: torch.Tensor
    prefill_rows: torch.Tensor
    prefill_slots: torch.Tensor
    prefill_mask: torch.Tensor


_local = threading.local()


class attention_context:  # noqa: N801 - used as a context manager, like torch.no_grad
    """Publish `meta` to the attention function for the duration of one forward pass."""

    def __init__(self, meta: AttentionMetadata) -> None:
        self.meta = meta

    def __enter__(self) -> AttentionMetadata:
        _local.meta = self.meta
        return self.meta

    def __exit__(self, *exc: object) -> None:
        _local.meta = None


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
    meta: AttentionMetadata | None = getattr(_local, "meta", None)
    assert meta is not None, "paged_attention called outside attention_context"
    k_cache, v_cache = meta.kv_caches[module.layer_idx]
    k_cache.index_copy_(0, meta.slot_mapping, key[0].transpose(0, 1).to(k_cache.dtype))
    v_cache.index_copy_(0, meta.slot_mapping, value[0].transpose(0, 1).to(v_cache.dtype))
    gqa = query.shape[1] != key.shape[1]
    out = query.new_empty(query.shape[:3] + (value.shape[-1],))  # [1, H, T, v_head_dim]
    if meta.decode_rows.numel():
        out[0][:, meta.decode_rows] = _decode_attention(
            query[0][:, meta.decode_rows], k_cache, v_cache, meta, scaling
        )
    if meta.prefill_rows.numel():
        q = query[:, :, meta.prefill_rows]  # [1, H, P, d]
        k = k_cache.index_select(0, meta.prefill_slots).transpose(0, 1).unsqueeze(0)
        v = v_cache.index_select(0, meta.prefill_slots).transpose(0, 1).unsqueeze(0)
        o = F.scaled_dot_product_attention(
            q,
            k.to(query.dtype),
            v.to(query.dtype),
            attn_mask=meta.prefill_mask,
            scale=scaling,
            enable_gqa=gqa,
        )
        out[:, :, meta.prefill_rows] = o
    return out.transpose(1, 2), None


def _decode_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scaling: float | None,
) -> torch.Tensor:
    """One query token per sequence over its own paged context.

    Args:
        query: `[H, D, d]`, the decode tokens' queries.
        k_cache, v_cache: `[num_slots, kvH, d]` / `[num_slots, kvH, v_d]`.

    Returns:
        `[H, D, v_d]` in the query's dtype.
    """
    heads, batch, head_dim = query.shape
    kv_heads = k_cache.shape[1]
    width = meta.decode_mask.shape[-1]
    tables = meta.decode_block_tables
    block = width // tables.shape[1]

    dtype = torch.float32 if batch <= _FLOAT32_DECODE_MAX_BATCH else query.dtype

    def gather(cache: torch.Tensor) -> torch.Tensor:  # -> contiguous [D, kvH, L, dim]
        blocks = cache.view(-1, block, *cache.shape[1:]).index_select(0, tables.flatten())
        ctx = blocks.view(batch, width, kv_heads, -1).permute(0, 2, 1, 3)
        return ctx.to(dtype, memory_format=torch.contiguous_format)

    q = query.transpose(0, 1).reshape(batch, kv_heads, heads // kv_heads, head_dim).to(dtype)
    scores = torch.matmul(q, gather(k_cache).transpose(-1, -2)).float()  # [D, kvH, g, L]
    scores.mul_(head_dim**-0.5 if scaling is None else scaling)
    scores.masked_fill_(~meta.decode_mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(dtype)
    out = torch.matmul(probs, gather(v_cache))  # [D, kvH, g, v_d]
    return out.reshape(batch, heads, -1).transpose(0, 1).to(query.dtype)


AttentionInterface.register(ATTENTION_NAME, paged_attention)
