"""DeepSeek-V4's attention pieces over paged caches, pure torch: the window compressor, the
lightning indexer and sparse attention over one shared K=V head.

Semantics are transformers' `modeling_deepseek_v4.py` (`DeepseekV4CSACompressor`,
`DeepseekV4HCACompressor`, `DeepseekV4Indexer`, `DeepseekV4IndexerScorer`,
`eager_attention_forward` with sinks) and the DeepSeek-V4 report, section 2.3, rewritten for
keys addressed by cache slot: every query names its own keys (`-1` = none), as the Ascend ops
`npu_sparse_flash_attention` / `npu_lightning_indexer` take per-query index lists
(vLLM-Ascend PR #8901; the CANN ops-transformer `sparse_flash_attention` and
`lightning_indexer` pages). Symbols: `T` query tokens, `H` query heads, `D` head size, `W`
raw-window keys per query, `K` compressed keys per query, `E` windows to pool, `R` tokens per
window (twice the ratio where windows overlap), `Hi`/`Di` indexer heads and size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

QUERY_CHUNK = 256
"""Queries gathered at once (bounds the `[chunk, W + K, D]` gathered keys)."""


def kv_compress(
    state_kv: torch.Tensor,
    state_gate: torch.Tensor,
    window_slots: torch.Tensor,
    position_bias: torch.Tensor,
    overlap: bool,
) -> torch.Tensor:
    """Pool each window's per-token projections into one entry (before its RMSNorm and RoPE).

    Args:
        state_kv: `[slots, C]` the compressor's `kv_proj` output per token.
        state_gate: `[slots, C]` its `gate_proj` output.
        window_slots: `[E, R]` the slots of each window's tokens, oldest first; `-1` for
            positions before the sequence (weight 0).
        position_bias: `[ratio, C]` float32, added to the gate by offset in the window.
        overlap: ratio-4 layers: `C = 2 * D` holds two series; entry `w` pools the first half
            (`Ca`) of window `w - 1` and the second half (`Cb`) of window `w`, so `R = 2 * ratio`
            and the output is `[E, C / 2]`. Otherwise `R = ratio`, output `[E, C]`.

    Returns:
        `[E, D]` in `state_kv.dtype`: `sum_j softmax_j(gate_j + bias_j) * kv_j` per channel, the
        softmax over the window's tokens in float32.
    """
    ratio = position_bias.shape[0]
    valid = (window_slots >= 0)[..., None]
    kv = state_kv[window_slots.clamp(min=0)] * valid  # [E, R, C]
    gate = state_gate[window_slots.clamp(min=0)].float()
    if overlap:
        d = kv.shape[-1] // 2
        gate_prev = gate[:, :ratio, :d] + position_bias[:, :d]
        gate_cur = gate[:, ratio:, d:] + position_bias[:, d:]
        kv = torch.cat((kv[:, :ratio, :d], kv[:, ratio:, d:]), dim=1)
        gate = torch.cat((gate_prev, gate_cur), dim=1)
    else:
        gate = gate + position_bias
    gate = gate.masked_fill(~valid, float("-inf"))
    weights = gate.softmax(dim=1, dtype=torch.float32).to(kv.dtype)
    return (kv * weights).sum(dim=1)


def lightning_indexer(
    query: torch.Tensor,
    weights: torch.Tensor,
    key_cache: torch.Tensor,
    entry_slots: torch.Tensor,
    top_k: int,
    scale: float,
) -> torch.Tensor:
    """Each query's `top_k` compressed entries by the lightning indexer's score.

    Args:
        query: `[T, Hi, Di]` indexer queries (after RoPE).
        weights: `[T, Hi]` per-head weights (`weights_proj(x) * Hi ** -0.5`).
        key_cache: `[entry_slots, Di]` indexer keys.
        entry_slots: `[T, N]` each query's visible entries (`-1` pads).
        top_k: entries kept per query.
        scale: `Di ** -0.5`.

    Returns:
        `[T, min(top_k, N)]` int64 slots of the kept entries, `-1` where fewer are visible.
        Score `sum_h w_h * relu(q_h . k) * scale` in float32.
    """
    tokens, n = entry_slots.shape
    keep = min(top_k, n)
    if keep == 0 or tokens == 0:
        return entry_slots.new_full((tokens, keep), -1)
    keys = key_cache[entry_slots.clamp(min=0)].float()  # [T, N, Di]
    scores = F.relu(torch.einsum("thd,tnd->thn", query.float(), keys)) * scale
    scores = (scores * weights.float()[..., None]).sum(dim=1)  # [T, N]
    scores = scores.masked_fill(entry_slots < 0, float("-inf"))
    top = scores.topk(keep, dim=-1)
    picked = entry_slots.gather(1, top.indices)
    return picked.masked_fill(top.values == float("-inf"), -1)


def sparse_shared_kv_attention(
    query: torch.Tensor,
    window_cache: torch.Tensor,
    window_slots: torch.Tensor,
    compressed_cache: torch.Tensor | None,
    compressed_slots: torch.Tensor | None,
    sinks: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Attention of each query over its own keys, where a key is also its value (one KV head
    shared by every query head), with a learned sink logit per head.

    Args:
        query: `[T, H, D]`.
        window_cache: `[slots, D]` raw K=V per token (the sliding window).
        window_slots: `[T, W]` each query's window keys (`-1` = none).
        compressed_cache: `[entry_slots, D]` compressed entries, or None.
        compressed_slots: `[T, K]` each query's compressed keys (`-1` = none), or None.
        sinks: `[H]` float32 sink logits (they take softmax mass and give no value).
        scale: softmax scale (`D ** -0.5`).

    Returns:
        `[T, H, D]` in `query.dtype`: `sum_k p_k v_k` with `p = softmax([q.k * scale, sink])`
        without the sink's share.
    """
    out = torch.empty_like(query)
    for lo in range(0, query.shape[0], QUERY_CHUNK):
        hi = lo + QUERY_CHUNK
        slots = window_slots[lo:hi]
        keys = window_cache[slots.clamp(min=0)]
        valid = slots >= 0
        if compressed_cache is not None and compressed_slots is not None:
            c = compressed_slots[lo:hi]
            keys = torch.cat((keys, compressed_cache[c.clamp(min=0)]), dim=1)
            valid = torch.cat((valid, c >= 0), dim=1)
        keys = keys.to(query.dtype)  # [t, W + K, D]
        logits = torch.einsum("thd,tkd->thk", query[lo:hi], keys) * scale
        logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
        sink = sinks.to(logits.dtype)[None, :, None].expand(logits.shape[0], -1, 1)
        combined = torch.cat((logits, sink), dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = combined.softmax(dim=-1)[..., :-1]
        out[lo:hi] = torch.einsum("thk,tkd->thd", probs, keys)
    return out
