"""Attention for prefill (variable-length, causal) and for decode over a paged KV cache.

Both are `softmax(scale * q k^T + mask) v` per sequence with grouped-query heads (query head `h`
reads K/V head `h // (Nq / Nkv)`). The layouts are the ones the Ascend kernels take:

- Prefill tokens are flattened, `[T, N, D]` (torch_npu `npu_fusion_attention` layout "TND",
  Ascend op-plugin docs docs/context/torch_npu-npu_fusion_attention.md), one causal block per
  sequence. The mask is bottom-right aligned ("rightDownCausal", `sparse_mode=3`): query `i` of a
  sequence with `q_len` queries and `kv_len` keys sees keys `j <= i + kv_len - q_len`, so a
  prefill chunk that continues a cached prefix attends to the whole prefix.
- Decode reads the paged cache through a block table (torch_npu `npu_incre_flash_attention` with
  `block_table`, docs/context/torch_npu-npu_incre_flash_attention.md): the cache is
  `[num_blocks, block_size, Nkv, D]` (the engine's `[num_blocks * block_size, Nkv, D]` cache
  viewed by block), the block table is int32 `[B, max_blocks]`, and `seq_lens` holds each
  sequence's context length, an int32 `[B]` tensor on the host (the engine builds it on the
  host; Ascend's `actual_seq_lengths` takes it as a list, CPU's kernel as the tensor, and a
  tensor keeps a captured decode graph free of per-step constants).

Decode also takes 8-bit caches (`engine.kv_cache_dtype` int8 / fp8_e4m3): K and V packed with a
per-token-per-head scale, `[num_blocks, block_size, Nkv, D + 2]` (`npu_ops.ops.kv_quant`); every
implementation dequantises the blocks the step reads first (`kv_quant.dequantize_blocks`).
"""

from __future__ import annotations

import torch

from npu_ops.ops.kv_quant import dequantize_blocks, is_quantized


def check_lens(q_lens: list[int], kv_lens: list[int], t_q: int, t_kv: int) -> None:
    """Validate per-sequence lengths against the flattened token counts.

    Raises:
        ValueError: counts differ, lengths do not sum to the tensors' tokens, or a sequence has
            more queries than keys.
    """
    if len(q_lens) != len(kv_lens):
        raise ValueError(f"{len(q_lens)} query lengths but {len(kv_lens)} key lengths")
    if sum(q_lens) != t_q or sum(kv_lens) != t_kv:
        raise ValueError(
            f"lengths sum to {sum(q_lens)}/{sum(kv_lens)} tokens, tensors hold {t_q}/{t_kv}"
        )
    for q, kv in zip(q_lens, kv_lens, strict=True):
        if q > kv:
            raise ValueError(f"a sequence has {q} queries but only {kv} keys; need q_len <= kv_len")


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal_offset: int | None
) -> torch.Tensor:
    """One sequence: q `[Sq, Nq, D]`, k `[Skv, Nkv, D]`, v `[Skv, Nkv, Dv]` → `[Sq, Nq, Dv]`.

    Statistics in float32, the result in `q.dtype`. `causal_offset` None attends every key
    (bidirectional); an int `c` lets query `i` see keys `j <= i + c`.
    """
    group = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), kf) * scale
    if causal_offset is not None:
        sq, skv = q.shape[0], k.shape[0]
        allowed = torch.ones(sq, skv, dtype=torch.bool, device=q.device).tril(causal_offset)
        scores = scores.masked_fill(~allowed, float("-inf"))
    probs = scores.softmax(dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, vf).to(q.dtype)


def prefill_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    q_lens: list[int],
    kv_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """Causal attention over a flattened batch of sequences (prefill or prefill chunks).

    Args:
        query: `[Tq, Nq, D]`, the sequences' queries concatenated.
        key: `[Tkv, Nkv, D]`, their keys concatenated (Nq a multiple of Nkv).
        value: `[Tkv, Nkv, Dv]` (Dv may be smaller than D, as for DeepSeek MLA expanded).
        q_lens: query tokens per sequence (host ints).
        kv_lens: key tokens per sequence, each `>= q_len` (bottom-right aligned causal mask).
        scale: softmax scale, usually `D ** -0.5`.

    Returns:
        `[Tq, Nq, Dv]` in `query.dtype`.

    Raises:
        ValueError: the lengths do not match the tensors, or a sequence has more queries than
            keys.
    """
    check_lens(q_lens, kv_lens, query.shape[0], key.shape[0])
    outs = []
    q0 = k0 = 0
    for q_len, kv_len in zip(q_lens, kv_lens, strict=True):
        q = query[q0 : q0 + q_len]
        outs.append(
            attend(q, key[k0 : k0 + kv_len], value[k0 : k0 + kv_len], scale, kv_len - q_len)
        )
        q0, k0 = q0 + q_len, k0 + kv_len
    return torch.cat(outs, dim=0)


def gather_context(
    cache: torch.Tensor, block_table: torch.Tensor, seq_index: int, seq_len: int
) -> torch.Tensor:
    """The first `seq_len` cached tokens of sequence `seq_index`: `[seq_len, Nkv, D]`."""
    block_size = cache.shape[1]
    n_blocks = -(-seq_len // block_size)
    blocks = block_table[seq_index, :n_blocks].long()
    return cache.index_select(0, blocks).flatten(0, 1)[:seq_len]


def check_paged_inputs(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
) -> None:
    """Validate decode inputs against each other.

    Raises:
        ValueError: block table dtype/shape or `seq_lens` do not fit the batch and cache.
    """
    batch = query.shape[0]
    if seq_lens.dtype != torch.int32 or seq_lens.dim() != 1:
        raise ValueError(
            f"seq_lens must be int32 [batch], got {seq_lens.dtype} {tuple(seq_lens.shape)}"
        )
    if block_table.dtype != torch.int32 or block_table.dim() != 2:
        raise ValueError(
            f"block_table must be int32 [batch, max_blocks], got {block_table.dtype} "
            f"{tuple(block_table.shape)}"
        )
    if block_table.shape[0] != batch or len(seq_lens) != batch:
        raise ValueError(
            f"batch is {batch} but block_table has {block_table.shape[0]} rows and seq_lens "
            f"{len(seq_lens)} entries"
        )
    block_size = key_cache.shape[1]
    longest = int(seq_lens.max()) if batch else 0
    need = -(-longest // block_size)
    if need > block_table.shape[1]:
        raise ValueError(
            f"a sequence of {longest} tokens needs {need} blocks of {block_size}, "
            f"block_table has {block_table.shape[1]} columns"
        )


def paged_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One new token per sequence attending to its whole cached context.

    Args:
        query: `[B, Nq, D]`, the new token of each sequence.
        key_cache: `[num_blocks, block_size, Nkv, D]`, already holding the new tokens' keys;
            or an 8-bit cache `[..., D + 2]` (`npu_ops.ops.kv_quant`).
        value_cache: `[num_blocks, block_size, Nkv, Dv]` (`[..., Dv + 2]` when 8-bit).
        block_table: int32 `[B, max_blocks]`; row `b` lists sequence `b`'s blocks in order.
        seq_lens: int32 `[B]` on the host, each sequence's context length in tokens, new
            token included.
        scale: softmax scale.

    Returns:
        `[B, Nq, Dv]` in `query.dtype`.

    Raises:
        ValueError: inconsistent block table or lengths (see `check_paged_inputs`).
    """
    check_paged_inputs(query, key_cache, block_table, seq_lens)
    if is_quantized(key_cache):
        (key_cache, value_cache), block_table = dequantize_blocks(
            (key_cache, value_cache), block_table, query.dtype
        )
    outs = []
    for b, seq_len in enumerate(seq_lens.tolist()):
        k = gather_context(key_cache, block_table, b, seq_len)
        v = gather_context(value_cache, block_table, b, seq_len)
        outs.append(attend(query[b : b + 1], k, v, scale, causal_offset=None))
    return torch.cat(outs, dim=0)
