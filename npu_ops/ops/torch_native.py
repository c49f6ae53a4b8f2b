"""The `torch` implementations: torch's own fused kernels, where torch offers one.

The default on CUDA, and on CPU for the norms and encoder attention. They are plain torch calls, so
they run on any device (which is how the tests and `ops-check --all-impls` check them against the
references). Sources: `torch.nn.functional.rms_norm`, `torch.nn.functional.layer_norm` and
`torch.nn.functional.scaled_dot_product_attention` (PyTorch docs; `enable_gqa` since 2.5). Ops
without a torch fused kernel (rotary, SwiGLU, MoE routing, W8A8) use the reference on CUDA.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from npu_ops.ops.attention import check_lens, check_paged_inputs, gather_context
from npu_ops.ops.encoder_attention import per_segment
from npu_ops.ops.kv_quant import dequantize_blocks, is_quantized


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`F.rms_norm` over the last dimension; see `npu_ops.ops.norm.rms_norm`."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add then `F.rms_norm`; see `npu_ops.ops.norm.add_rms_norm`."""
    summed = x + residual
    return F.rms_norm(summed, (x.shape[-1],), weight, eps), summed


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """`F.layer_norm` over the last dimension; see `npu_ops.ops.norm.layer_norm`."""
    beta = None if bias is None else bias.to(x.dtype)
    return F.layer_norm(x, (x.shape[-1],), weight.to(x.dtype), beta, eps)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """q `[Sq, Nq, D]`, k `[Skv, Nkv, D]`, v `[Skv, Nkv, Dv]` (bool mask `[Sq, Skv]`)."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),
        k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0),
        attn_mask=mask,
        scale=scale,
        enable_gqa=q.shape[1] != k.shape[1],
    )
    return out[0].transpose(0, 1)


def prefill_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    q_lens: list[int],
    kv_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """SDPA per sequence with a bottom-right causal mask; see `attention.prefill_attention`."""
    check_lens(q_lens, kv_lens, query.shape[0], key.shape[0])
    outs = []
    q0 = k0 = 0
    for q_len, kv_len in zip(q_lens, kv_lens, strict=True):
        mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device)
        mask = mask.tril(kv_len - q_len)
        outs.append(
            _sdpa(
                query[q0 : q0 + q_len],
                key[k0 : k0 + kv_len],
                value[k0 : k0 + kv_len],
                mask,
                scale,
            )
        )
        q0, k0 = q0 + q_len, k0 + kv_len
    return torch.cat(outs, dim=0)


def encoder_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """SDPA per segment, no mask; see `npu_ops.ops.encoder_attention.encoder_attention`."""
    return per_segment(lambda q, k, v: _sdpa(q, k, v, None, scale), query, key, value, cu_seqlens)


def paged_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One batched SDPA over contexts gathered through the block table, padded and masked.

    See `npu_ops.ops.attention.paged_decode_attention` for shapes.
    """
    check_paged_inputs(query, key_cache, block_table, seq_lens)
    if is_quantized(key_cache):  # 8-bit cache: dequantise the blocks read (`kv_quant`)
        (key_cache, value_cache), block_table = dequantize_blocks(
            (key_cache, value_cache), block_table, query.dtype
        )
    lens = seq_lens.tolist()
    batch, max_len = len(lens), max(lens)
    nkv, dk, dv = key_cache.shape[2], key_cache.shape[3], value_cache.shape[3]
    k = key_cache.new_zeros(batch, max_len, nkv, dk)
    v = value_cache.new_zeros(batch, max_len, nkv, dv)
    for b, seq_len in enumerate(lens):
        k[b, :seq_len] = gather_context(key_cache, block_table, b, seq_len)
        v[b, :seq_len] = gather_context(value_cache, block_table, b, seq_len)
    mask = (torch.arange(max_len, device=query.device) < seq_lens.to(query.device)[:, None])[
        :, None, None, :
    ]
    out = F.scaled_dot_product_attention(
        query.unsqueeze(2),  # [B, Nq, 1, D]
        k.transpose(1, 2).to(query.dtype),
        v.transpose(1, 2).to(query.dtype),
        attn_mask=mask,
        scale=scale,
        enable_gqa=query.shape[1] != nkv,
    )
    return out.squeeze(2)
