"""DeepSeek multi-head latent attention (MLA): the prolog and decode attention, pure torch.

Names and layouts are those of the Ascend kernels, so the `npu` implementations are thin calls:
`torch_npu.npu_mla_prolog_v2` (Ascend op-plugin docs/context/torch_npu-npu_mla_prolog_v2.md)
and the MLA mode of `torch_npu.npu_fused_infer_attention_score` (`query_rope`/`key_rope` given;
docs/context/torch_npu-npu_fused_infer_attention_score.md). Symbols, as in those pages and in
the DeepSeek-V2 paper (arXiv 2405.04434, section 2.1.2): `T` tokens, `He` hidden size, `Hcq`
`q_lora_rank`, `N` query heads, `D` `qk_nope_head_dim`, `Dr` `qk_rope_head_dim`, `Hckv`
`kv_lora_rank`.

The prolog computes, for every token,
- `c_q = RmsNorm(x W_dq)` (skipped, `c_q = x`, without a query LoRA, as in DeepSeek-V2-Lite),
  `[q_nope | q_pe] = c_q W_uq_qr` per head;
- the absorbed query `q_nope W_uk` (`[T, N, Hckv]`): `W_uk` is each head's key up-projection
  (the `k_nope` rows of `kv_b_proj`), so `q_nope . k_nope = (q_nope W_uk) . c_kv` and attention
  runs in the latent space;
- `c_kv = RmsNorm(x W_dkv)` and `k_pe = RoPE(x W_kr)`, written to the paged caches at
  `cache_index`;
- `RoPE(q_pe)`.

RoPE rotates DeepSeek's interleaved pairs `(x0, x1), (x2, x3), ...`: the pairs are
de-interleaved (even elements, then odd) and rotated "half"-style with `cos`/`sin` laid out
`cat(freqs, freqs)` (the op-plugin test's baseline; transformers'
`apply_rotary_pos_emb_interleave`, bit for bit). The output is therefore in de-interleaved order,
for queries and keys alike, which leaves every `q_pe . k_pe` unchanged. `rope_interleaved=False`
rotates plain halves (transformers' DeepSeek-V3 with `rope_interleave: false`).

Decode attention is one query token per sequence against its cached latent: scores
`(q . c_kv + q_pe . k_pe) * scale`, softmax over the context, output `sum p c_kv`
(`[B, N, Hckv]`, still in the latent space; the caller applies each head's `W_uv` and `o_proj`).

Both take 8-bit latent caches too (`engine.kv_cache_dtype` int8 / fp8_e4m3, `npu_ops.ops.kv_quant`):
`c_kv` and `k_pe` each packed with one float16 scale per token, `[BlockNum, BlockSize, 1,
Hckv + 2]` and `[..., Dr + 2]`; the prolog quantises what it writes, decode dequantises what
it reads.
"""

from __future__ import annotations

import torch

from npu_ops.ops.activation import rotate
from npu_ops.ops.attention import check_paged_inputs
from npu_ops.ops.kv_quant import dequantize_kv, is_quantized, write_cache
from npu_ops.ops.norm import rms_norm


def mla_rope(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = True
) -> torch.Tensor:
    """DeepSeek's rotary embedding of `[T, N, Dr]` (see the module docstring), in float32.

    Args:
        x: `[T, N, Dr]` query or key rotary parts.
        cos: `[T, Dr]`, `cat(freqs, freqs)` cosines (times any attention scaling of the rotary
            type, e.g. yarn's).
        sin: `[T, Dr]`, the matching sines.
        interleaved: de-interleave the pairs first (DeepSeek's checkpoints).

    Returns:
        `[T, N, Dr]` in `x.dtype`.
    """
    xf = x.float()
    if interleaved:
        xf = torch.cat((xf[..., 0::2], xf[..., 1::2]), dim=-1)
    c, s = cos.float().unsqueeze(1), sin.float().unsqueeze(1)
    return (xf * c + rotate(xf, "half") * s).to(x.dtype)


def mla_prolog(
    token_x: torch.Tensor,
    weight_dq: torch.Tensor | None,
    weight_uq_qr: torch.Tensor,
    weight_uk: torch.Tensor,
    weight_dkv_kr: torch.Tensor,
    rmsnorm_gamma_cq: torch.Tensor | None,
    rmsnorm_gamma_ckv: torch.Tensor,
    rope_sin: torch.Tensor,
    rope_cos: torch.Tensor,
    cache_index: torch.Tensor,
    kv_cache: torch.Tensor,
    kr_cache: torch.Tensor,
    rmsnorm_epsilon_cq: float = 1e-5,
    rmsnorm_epsilon_ckv: float = 1e-5,
    rope_interleaved: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """MLA's projections for a flattened token batch, writing the latent cache.

    Weights are in `x @ W` layout (`[in, out]`, the transpose of `nn.Linear.weight`), as the
    Ascend kernel takes them.

    Args:
        token_x: `[T, He]`.
        weight_dq: `[He, Hcq]`, the query down-projection, or None without a query LoRA.
        weight_uq_qr: `[Hcq, N * (D + Dr)]` (`[He, ...]` when `weight_dq` is None): per head,
            `D` no-rope then `Dr` rope columns.
        weight_uk: `[N, D, Hckv]`, each head's key up-projection.
        weight_dkv_kr: `[He, Hckv + Dr]`, the latent then the rotary-key columns.
        rmsnorm_gamma_cq: `[Hcq]` (None when `weight_dq` is).
        rmsnorm_gamma_ckv: `[Hckv]`.
        rope_sin: `[T, Dr]` (see `mla_rope`).
        rope_cos: `[T, Dr]`.
        cache_index: `[T]` int64, each token's cache slot (`block * BlockSize + offset`).
        kv_cache: `[BlockNum, BlockSize, 1, Hckv]`, contiguous; `c_kv` written in place (8-bit
            caches `[..., Hckv + 2]`, quantised on the way in).
        kr_cache: `[BlockNum, BlockSize, 1, Dr]`, contiguous; `k_pe` written in place (8-bit:
            `[..., Dr + 2]`).
        rmsnorm_epsilon_cq: epsilon of the `c_q` RMSNorm.
        rmsnorm_epsilon_ckv: epsilon of the `c_kv` RMSNorm.
        rope_interleaved: see `mla_rope`.

    Returns:
        `(query [T, N, Hckv], query_rope [T, N, Dr], kv_cache, kr_cache)` in `token_x.dtype`
        (the caches are the arguments, updated).

    Raises:
        ValueError: `cache_index` does not hold one slot per token, or `weight_uq_qr`'s width
            is not `N * (D + Dr)`.
    """
    tokens = token_x.shape[0]
    heads, nope, latent = weight_uk.shape
    rope = rope_cos.shape[-1]
    if cache_index.shape != (tokens,):
        raise ValueError(f"cache_index {tuple(cache_index.shape)} must be [{tokens}]")
    if weight_uq_qr.shape[-1] != heads * (nope + rope):
        raise ValueError(
            f"weight_uq_qr has {weight_uq_qr.shape[-1]} columns, not N * (D + Dr) = "
            f"{heads} * ({nope} + {rope})"
        )
    c_q = token_x
    if weight_dq is not None:
        assert rmsnorm_gamma_cq is not None, "a query down-projection needs its RMSNorm gamma"
        c_q = rms_norm(token_x @ weight_dq, rmsnorm_gamma_cq, rmsnorm_epsilon_cq)
    q = (c_q @ weight_uq_qr).view(tokens, heads, nope + rope)
    q_nope, q_pe = q.split([nope, rope], dim=-1)
    query = torch.bmm(q_nope.transpose(0, 1), weight_uk).transpose(0, 1)  # [T, N, Hckv]
    query_rope = mla_rope(q_pe, rope_cos, rope_sin, rope_interleaved)
    kv = token_x @ weight_dkv_kr
    c_kv = rms_norm(kv[:, :latent], rmsnorm_gamma_ckv, rmsnorm_epsilon_ckv)
    k_pe = mla_rope(kv[:, None, latent:], rope_cos, rope_sin, rope_interleaved)
    write_cache(kv_cache.view(-1, 1, kv_cache.shape[-1]), cache_index, c_kv[:, None])
    write_cache(kr_cache.view(-1, 1, kr_cache.shape[-1]), cache_index, k_pe)
    return query, query_rope, kv_cache, kr_cache


def mla_decode_attention(
    query: torch.Tensor,
    query_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    kr_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One new token per sequence attending, in the latent space, to its cached context.

    Args:
        query: `[B, N, Hckv]`, the absorbed queries (`mla_prolog`'s `query`).
        query_rope: `[B, N, Dr]`.
        kv_cache: `[BlockNum, BlockSize, 1, Hckv]`, already holding the new tokens' `c_kv`
            (8-bit: `[..., Hckv + 2]`, see the module docstring).
        kr_cache: `[BlockNum, BlockSize, 1, Dr]`, their `k_pe` (8-bit: `[..., Dr + 2]`).
        block_table: int32 `[B, max_blocks]`; row `b` lists sequence `b`'s blocks in order.
        seq_lens: int32 `[B]` on the host, each context length in tokens, new token included.
        scale: softmax scale: `(D + Dr) ** -0.5`, times yarn's `mscale ** 2` where the rotary
            type is yarn (transformers' `DeepseekV2Attention.scaling`).

    Returns:
        `[B, N, Hckv]` in `query.dtype`: the attention-weighted `c_kv` of every head.

    Every block of the table is read (the engine gives decode steps the width their longest
    context needs; graph steps a fixed width), positions at or past `seq_lens` masked. Inside a
    captured graph (`torch.compile`) the inputs are not checked: reading `seq_lens` on the host
    would split the graph (as `cpu_attention.paged_decode_attention`).

    Raises:
        ValueError: inconsistent block table or lengths (`attention.check_paged_inputs`; eager
            calls).
    """
    if not torch.compiler.is_compiling():
        check_paged_inputs(query, kv_cache, block_table, seq_lens)
    blocks = block_table.long()
    c_kv = _read(kv_cache[blocks].flatten(1, 2))  # [B, S, Hckv]
    k_pe = _read(kr_cache[blocks].flatten(1, 2))  # [B, S, Dr]
    scores = torch.einsum("bnl,bsl->bns", query.float(), c_kv)
    scores += torch.einsum("bnr,bsr->bns", query_rope.float(), k_pe)
    scores *= scale
    position = torch.arange(c_kv.shape[1], device=query.device)
    beyond = position[None, None, :] >= seq_lens.to(query.device)[:, None, None]
    probs = scores.masked_fill(beyond, float("-inf")).softmax(dim=-1)
    return torch.einsum("bns,bsl->bnl", probs, c_kv).to(query.dtype)


def _read(rows: torch.Tensor) -> torch.Tensor:
    """`[B, S, 1, W]` cached rows as float32 `[B, S, W']`, dequantised when 8-bit."""
    values = dequantize_kv(rows, torch.float32) if is_quantized(rows) else rows.float()
    return values.flatten(2)
