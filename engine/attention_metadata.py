"""The per-step inputs of paged attention (`engine.attention`), published by the model runner in
the step's `engine.forward_context.ForwardContext`.

Its own module so that the forward context can name it without importing the attention
function, which reads the forward context.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from npu_ops.ops.registry import OpTable


@dataclass(frozen=True)
class AttentionMetadata:
    """Per-step inputs of paged attention.

    Attributes:
        slot_mapping: `[T]` int64, cache slot of each new token.
        kv_caches: per layer, `(k_cache, v_cache)` of shape
            `[num_blocks * block_size, num_kv_heads, head_dim]` (K and V head dims may differ);
            for DeepSeek MLA the latent `(c_kv, k_pe)` pair (`engine.mla_attention`).
        block_size: tokens per KV block.
        decode_rows: `[D]` int64, batch positions of the decode tokens: a one-token step's
            token and every generated token (several of one sequence when it verifies
            speculative draft tokens; `engine.model_runner`), each attending on its own.
        decode_block_tables: `[D, B]` int32, each decode token's sequence's block table,
            padded to the longest (`B` blocks) with block 0.
        decode_seq_lens: `[D]` int32 on the host, each decode token's context length in
            tokens (positions up to its own, itself included).
        prefill_rows: `[P]` int64, batch positions of the prefill-chunk tokens (the prompt
            tokens of chunks longer than one token).
        prefill_pad_index: `[P]` int64, where each of them sits in the padded `[S * Q]` query
            batch (`S` prefill sequences, `Q` tokens of the longest chunk).
        prefill_block_tables: `[S, B']` int64, the prefill sequences' block tables, padded.
        prefill_mask: `[S, 1, Q, B' * block_size]` bool, True where a query may attend a
            context token (causal, own context only; padded query rows see token 0 only).
        ops: the process's op table (`npu_ops.ops.active_ops()`), chosen once by the model
            runner; read from here so that a captured graph never calls into the registry.
    """

    slot_mapping: torch.Tensor
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
    block_size: int
    decode_rows: torch.Tensor
    decode_block_tables: torch.Tensor
    decode_seq_lens: torch.Tensor
    prefill_rows: torch.Tensor
    prefill_pad_index: torch.Tensor
    prefill_block_tables: torch.Tensor
    prefill_mask: torch.Tensor
    ops: OpTable
