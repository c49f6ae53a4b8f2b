"""`npu` MLA: `npu_mla_prolog_v2` and the MLA mode of `npu_fused_infer_attention_score`.

Both kernels take DeepSeek-V3-sized MLA only; other shapes, dtypes or layouts run the reference
(`npu_ops.ops.mla`), on the device, like `paged_decode_attention` with differing K/V head sizes.

- Prolog: `torch_npu.npu_mla_prolog_v2(token_x, weight_dq, weight_uq_qr, weight_uk,
  weight_dkv_kr, rmsnorm_gamma_cq, rmsnorm_gamma_ckv, rope_sin, rope_cos, cache_index, kv_cache,
  kr_cache, *, ..., rmsnorm_epsilon_cq, rmsnorm_epsilon_ckv, cache_mode="PA_BSND") -> (query,
  query_rope, kv_cache_out, kr_cache_out, dequant_scale_q_nope)`, unquantised: bfloat16
  throughout, `token_x` `(T, He)`, `He` = 7168, `Hcq` = 1536, `Hckv` = 512, `D` = 128, `Dr` = 64,
  `N` in 1, 2, 4, ... 128, `Nkv` = 1, BlockSize 16 or 128; `weight_dq`, `weight_uq_qr` and
  `weight_dkv_kr` in the FRACTAL_NZ format (format 29). The caches are updated in place
  ("本质in-place更新"). A query LoRA is required (DeepSeek-V2-Lite has none) and the rotary
  pairs are interleaved (the page's baseline de-interleaves them). Source: Ascend op-plugin
  docs/context/torch_npu-npu_mla_prolog_v2.md and test/test_custom_ops/test_mla_prolog_v2.py.
  The three weights are cast to FRACTAL_NZ in place on first use
  (`torch_npu.npu_format_cast_(w, 29)`, as vllm-ascend does after loading): torch ops read an
  NZ tensor as before, so the reference still runs on them.
- Decode: `torch_npu.npu_fused_infer_attention_score(query, key, value, *, query_rope,
  key_rope, block_table, actual_seq_lengths_kv, num_heads, num_key_value_heads, scale,
  input_layout, sparse_mode, block_size) -> (attention_out, softmax_lse)` in MLA mode: `query`
  `(B, 1, N, 512)` BSND with `query_rope` `(B, 1, N, 64)`; `key` = `value` = the latent cache as
  `(blocknum, blocksize, 512)` and `key_rope` the rotary cache `(blocknum, blocksize, 64)` (page
  attention is required; a BSND query takes the `(blocknum, blocksize, H)` cache layout);
  `N` 32, 64 or 128, one KV head, block_size 16 or 128, `sparse_mode=0` and no mask for one
  query token, float16/bfloat16; `attention_out` has the value's `D` (512). Source:
  docs/context/torch_npu-npu_fused_infer_attention_score.md, "query_rope和key_rope输入时即为MLA
  场景".
- 8-bit latent caches (`npu_ops.ops.kv_quant`, per-token scales): `_prolog_fits` needs bfloat16
  caches, so the reference writes (and quantises) them; the kernel's own int8 cache mode takes
  static scales. Decode dequantises the blocks it reads (`kv_quant.dequantize_blocks`) and runs
  the kernel on them.
"""

from __future__ import annotations

import torch

from npu_ops.ops import mla as reference
from npu_ops.ops.attention import check_paged_inputs
from npu_ops.ops.kv_quant import dequantize_blocks, is_quantized
from npu_ops.ops.npu.module import torch_npu

FRACTAL_NZ = 29
"""`acl_format` of FRACTAL_NZ (`torch_npu.npu_format_cast(x, 29)` in the op pages' examples)."""

PROLOG_HEADS = frozenset({1, 2, 4, 8, 16, 32, 64, 128})
DECODE_HEADS = frozenset({32, 64, 128})
BLOCK_SIZES = frozenset({16, 128})
_LATENT, _ROPE, _NOPE, _HIDDEN, _Q_RANK = 512, 64, 128, 7168, 1536


def _prolog_fits(
    weight_dq: torch.Tensor | None,
    weight_uk: torch.Tensor,
    weight_dkv_kr: torch.Tensor,
    rope_cos: torch.Tensor,
    kv_cache: torch.Tensor,
    rope_interleaved: bool,
    tensors: tuple[torch.Tensor | None, ...],
) -> bool:
    """Whether `npu_mla_prolog_v2`'s documented constraints hold for these inputs."""
    heads, nope, latent = weight_uk.shape
    return (
        weight_dq is not None
        and rope_interleaved
        and all(t is not None and t.dtype == torch.bfloat16 for t in tensors)
        and tuple(weight_dq.shape) == (_HIDDEN, _Q_RANK)
        and tuple(weight_dkv_kr.shape) == (_HIDDEN, _LATENT + _ROPE)
        and (nope, latent, rope_cos.shape[-1]) == (_NOPE, _LATENT, _ROPE)
        and heads in PROLOG_HEADS
        and kv_cache.shape[1] in BLOCK_SIZES
        and kv_cache.shape[2] == 1
    )


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
    """`npu_mla_prolog_v2` where its constraints hold, else the reference; see
    `npu_ops.ops.mla.mla_prolog` for shapes."""
    args = (
        token_x,
        weight_dq,
        weight_uq_qr,
        weight_uk,
        weight_dkv_kr,
        rmsnorm_gamma_cq,
        rmsnorm_gamma_ckv,
        rope_sin,
        rope_cos,
        cache_index,
        kv_cache,
        kr_cache,
        rmsnorm_epsilon_cq,
        rmsnorm_epsilon_ckv,
    )
    floats = (token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq)
    floats += (rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache)
    fits = _prolog_fits(
        weight_dq, weight_uk, weight_dkv_kr, rope_cos, kv_cache, rope_interleaved, floats
    )
    if not fits:
        return reference.mla_prolog(*args, rope_interleaved=rope_interleaved)
    npu = torch_npu()
    for weight in (weight_dq, weight_uq_qr, weight_dkv_kr):
        assert weight is not None
        if int(npu.get_npu_format(weight)) != FRACTAL_NZ:
            npu.npu_format_cast_(weight, FRACTAL_NZ)
    query, query_rope, _, _, _ = npu.npu_mla_prolog_v2(
        *args[:12],
        rmsnorm_epsilon_cq=rmsnorm_epsilon_cq,
        rmsnorm_epsilon_ckv=rmsnorm_epsilon_ckv,
        cache_mode="PA_BSND",
    )
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
    """The MLA mode of `npu_fused_infer_attention_score` where its constraints hold, else the
    reference; see `npu_ops.ops.mla.mla_decode_attention` for shapes."""
    check_paged_inputs(query, kv_cache, block_table, seq_lens)
    if is_quantized(kv_cache):
        (kv_cache, kr_cache), block_table = dequantize_blocks(
            (kv_cache, kr_cache), block_table, query.dtype
        )
    batch, heads, latent = query.shape
    num_blocks, block_size, kv_heads, _ = kv_cache.shape
    rope = kr_cache.shape[-1]
    fits = (
        query.dtype in (torch.float16, torch.bfloat16)
        and all(t.dtype == query.dtype for t in (query_rope, kv_cache, kr_cache))
        and (latent, rope, kv_heads) == (_LATENT, _ROPE, 1)
        and heads in DECODE_HEADS
        and block_size in BLOCK_SIZES
    )
    if not fits:
        return reference.mla_decode_attention(
            query, query_rope, kv_cache, kr_cache, block_table, seq_lens, scale
        )
    latent_cache = kv_cache.view(num_blocks, block_size, latent)
    out, _ = torch_npu().npu_fused_infer_attention_score(
        query.contiguous().view(batch, 1, heads, latent),
        latent_cache,
        latent_cache,
        query_rope=query_rope.contiguous().view(batch, 1, heads, rope),
        key_rope=kr_cache.view(num_blocks, block_size, rope),
        block_table=block_table,
        actual_seq_lengths_kv=seq_lens.tolist(),
        num_heads=heads,
        num_key_value_heads=1,
        scale=scale,
        input_layout="BSND",
        sparse_mode=0,
        block_size=block_size,
    )
    return out.view(batch, heads, latent)
