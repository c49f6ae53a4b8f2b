"""Recording stand-ins for torch_npu's MLA kernels and the FRACTAL_NZ format calls.

Same contract as `fake_torch_npu.py`: the documented signatures, the documented constraints
asserted, answers from the op pages' own formulas (written here independently of
`npu_ops.ops.mla`). Sources: Ascend op-plugin docs/context/torch_npu-npu_mla_prolog_v2.md (and
the baseline of test/test_custom_ops/test_mla_prolog_v2.py), and
docs/context/torch_npu-npu_fused_infer_attention_score.md ("query_rope和key_rope输入时即为MLA
场景", query D = 512).
"""

from __future__ import annotations

from typing import Any

import torch
from fake_torch_npu_util import HALVES, record

ND, FRACTAL_NZ = 2, 29
PROLOG_HEADS = (1, 2, 4, 8, 16, 32, 64, 128)


def get_npu_format(self: torch.Tensor) -> int:
    """torch_npu.get_npu_format(tensor) -> acl format (ND unless cast)."""
    return int(getattr(self, "_fake_npu_format", ND))


def npu_format_cast_(self: torch.Tensor, acl_format: int) -> torch.Tensor:
    """torch_npu.npu_format_cast_(self, acl_format): the storage format changes in place."""
    record("npu_format_cast_", self=self, acl_format=acl_format)
    assert acl_format in (ND, FRACTAL_NZ), acl_format
    self._fake_npu_format = acl_format  # type: ignore[attr-defined]
    return self


def _rms(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * gamma.float()


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The page's baseline: pairs de-interleaved (`reshape(.., Dr/2, 2).transpose`), then
    `x * cos + rotate_half(x) * sin`; x `[T, N, Dr]`, cos/sin `[T, Dr]`."""
    t, n, dr = x.shape
    x = x.reshape(t, n, dr // 2, 2).transpose(3, 2).reshape(t, n, dr)
    half = torch.cat((-x[..., dr // 2 :], x[..., : dr // 2]), dim=-1)
    return x * cos[:, None] + half * sin[:, None]


def npu_mla_prolog_v2(
    token_x: torch.Tensor,
    weight_dq: torch.Tensor,
    weight_uq_qr: torch.Tensor,
    weight_uk: torch.Tensor,
    weight_dkv_kr: torch.Tensor,
    rmsnorm_gamma_cq: torch.Tensor,
    rmsnorm_gamma_ckv: torch.Tensor,
    rope_sin: torch.Tensor,
    rope_cos: torch.Tensor,
    cache_index: torch.Tensor,
    kv_cache: torch.Tensor,
    kr_cache: torch.Tensor,
    *,
    dequant_scale_x: torch.Tensor | None = None,
    dequant_scale_w_dq: torch.Tensor | None = None,
    dequant_scale_w_uq_qr: torch.Tensor | None = None,
    dequant_scale_w_dkv_kr: torch.Tensor | None = None,
    quant_scale_ckv: torch.Tensor | None = None,
    quant_scale_ckr: torch.Tensor | None = None,
    smooth_scales_cq: torch.Tensor | None = None,
    rmsnorm_epsilon_cq: float = 1e-05,
    rmsnorm_epsilon_ckv: float = 1e-05,
    cache_mode: str = "PA_BSND",
) -> Any:
    """torch_npu.npu_mla_prolog_v2, modelled unquantised with BS merged (`token_x` `(T, He)`)."""
    record(
        "npu_mla_prolog_v2",
        token_x=token_x,
        weight_dq=weight_dq,
        weight_uq_qr=weight_uq_qr,
        weight_uk=weight_uk,
        weight_dkv_kr=weight_dkv_kr,
        rope_sin=rope_sin,
        rope_cos=rope_cos,
        cache_index=cache_index,
        kv_cache=kv_cache,
        kr_cache=kr_cache,
        rmsnorm_epsilon_cq=rmsnorm_epsilon_cq,
        rmsnorm_epsilon_ckv=rmsnorm_epsilon_ckv,
        cache_mode=cache_mode,
        weight_formats=tuple(get_npu_format(w) for w in (weight_dq, weight_uq_qr, weight_dkv_kr)),
    )
    quant = (dequant_scale_x, dequant_scale_w_dq, dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr)
    quant += (quant_scale_ckv, quant_scale_ckr, smooth_scales_cq)
    assert all(q is None for q in quant), "modelled: the unquantised scenario"
    floats = (token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq)
    floats += (rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache)
    assert all(t.dtype == torch.bfloat16 for t in floats), [t.dtype for t in floats]
    assert cache_mode == "PA_BSND", cache_mode
    assert token_x.dim() == 2, "modelled: BS merged, (T, He)"
    t, he = token_x.shape
    n, d, hckv = weight_uk.shape
    dr = rope_cos.shape[-1]
    assert (he, d, dr, hckv) == (7168, 128, 64, 512), (he, d, dr, hckv)
    assert n in PROLOG_HEADS, n
    assert tuple(weight_dq.shape) == (he, 1536) and tuple(rmsnorm_gamma_cq.shape) == (1536,)
    assert tuple(weight_uq_qr.shape) == (1536, n * (d + dr)), weight_uq_qr.shape
    assert tuple(weight_dkv_kr.shape) == (he, hckv + dr), weight_dkv_kr.shape
    assert tuple(rmsnorm_gamma_ckv.shape) == (hckv,)
    for w in (weight_dq, weight_uq_qr, weight_dkv_kr):
        assert get_npu_format(w) == FRACTAL_NZ, "weight_dq, weight_uq_qr, weight_dkv_kr: NZ"
    assert get_npu_format(weight_uk) == ND, "weight_uk: ND"
    assert tuple(rope_sin.shape) == tuple(rope_cos.shape) == (t, dr)
    assert cache_index.dtype == torch.int64 and tuple(cache_index.shape) == (t,)
    block_num, block_size = kv_cache.shape[:2]
    assert tuple(kv_cache.shape) == (block_num, block_size, 1, hckv), kv_cache.shape
    assert tuple(kr_cache.shape) == (block_num, block_size, 1, dr), kr_cache.shape
    assert block_size in (16, 128), block_size
    x = token_x.float()
    c_q = _rms(x @ weight_dq.float(), rmsnorm_gamma_cq, rmsnorm_epsilon_cq)
    q = (c_q @ weight_uq_qr.float()).reshape(t, n, d + dr)
    query = torch.einsum("tnd,ndh->tnh", q[..., :d], weight_uk.float())
    cos, sin = rope_cos.float(), rope_sin.float()
    query_rope = _rope(q[..., d:], cos, sin)
    kv = x @ weight_dkv_kr.float()
    c_kv = _rms(kv[:, :hckv], rmsnorm_gamma_ckv, rmsnorm_epsilon_ckv)
    k_r = _rope(kv[:, None, hckv:], cos, sin)
    kv_cache.view(-1, hckv)[cache_index] = c_kv.to(kv_cache.dtype)
    kr_cache.view(-1, dr)[cache_index] = k_r[:, 0].to(kr_cache.dtype)
    scale = torch.zeros(1, dtype=torch.float32)
    return query.bfloat16(), query_rope.bfloat16(), kv_cache, kr_cache, scale


def npu_fused_infer_attention_score(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    pse_shift: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    actual_seq_lengths: list[int] | None = None,
    actual_seq_lengths_kv: list[int] | None = None,
    dequant_scale1: torch.Tensor | None = None,
    quant_scale1: torch.Tensor | None = None,
    dequant_scale2: torch.Tensor | None = None,
    quant_scale2: torch.Tensor | None = None,
    quant_offset2: torch.Tensor | None = None,
    antiquant_scale: torch.Tensor | None = None,
    antiquant_offset: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    query_padding_size: torch.Tensor | None = None,
    kv_padding_size: torch.Tensor | None = None,
    key_antiquant_scale: torch.Tensor | None = None,
    key_antiquant_offset: torch.Tensor | None = None,
    value_antiquant_scale: torch.Tensor | None = None,
    value_antiquant_offset: torch.Tensor | None = None,
    key_shared_prefix: torch.Tensor | None = None,
    value_shared_prefix: torch.Tensor | None = None,
    actual_shared_prefix_len: list[int] | None = None,
    query_rope: torch.Tensor | None = None,
    key_rope: torch.Tensor | None = None,
    key_rope_antiquant_scale: torch.Tensor | None = None,
    num_heads: int = 1,
    scale: float = 1.0,
    pre_tokens: int = 2147483647,
    next_tokens: int = 2147483647,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    inner_precise: int = 0,
    block_size: int = 0,
    antiquant_mode: int = 0,
    softmax_lse_flag: bool = False,
    key_antiquant_mode: int = 0,
    value_antiquant_mode: int = 0,
) -> Any:
    """torch_npu.npu_fused_infer_attention_score, modelled for the MLA decode mode: query D 512
    with `query_rope`/`key_rope`, page attention, one query token (BSND)."""
    record(
        "npu_fused_infer_attention_score",
        query=query,
        key=key,
        value=value,
        query_rope=query_rope,
        key_rope=key_rope,
        block_table=block_table,
        actual_seq_lengths_kv=actual_seq_lengths_kv,
        num_heads=num_heads,
        num_key_value_heads=num_key_value_heads,
        scale=scale,
        input_layout=input_layout,
        sparse_mode=sparse_mode,
        block_size=block_size,
        same_key_value=key is value,
    )
    assert query_rope is not None and key_rope is not None, "modelled: the MLA mode"
    assert input_layout == "BSND" and query.dim() == 4, "modelled: BSND"
    b, s, n, d = query.shape
    assert s == 1 and d == 512, "MLA decode: Q_S 1, query d 512"
    assert n == num_heads and n in (32, 64, 128), "query n must be 32, 64 or 128"
    assert num_key_value_heads == 1, "key/value n must be 1"
    assert query.dtype in HALVES and all(
        t.dtype == query.dtype for t in (key, value, query_rope, key_rope)
    )
    assert query.is_contiguous() and query_rope.is_contiguous(), "no non-contiguous tensors"
    assert tuple(query_rope.shape) == (b, 1, n, 64), query_rope.shape
    # page attention with a BSND query: the (blocknum, blocksize, H) cache layout
    assert key.dim() == 3 and key.shape == value.shape and key.shape[2] == 512, key.shape
    assert tuple(key_rope.shape) == (*key.shape[:2], 64), key_rope.shape
    assert block_size == key.shape[1] and block_size in (16, 128), block_size
    assert sparse_mode == 0 and atten_mask is None, "Q_S 1: sparse 0 without a mask"
    assert pse_shift is None and not softmax_lse_flag and key_shared_prefix is None
    assert block_table is not None and block_table.dtype == torch.int32
    assert block_table.dim() == 2 and block_table.shape[0] == b
    assert isinstance(actual_seq_lengths_kv, list) and len(actual_seq_lengths_kv) == b
    assert all(isinstance(v, int) for v in actual_seq_lengths_kv)
    out = torch.zeros(b, 1, n, d)
    for i, kv_len in enumerate(actual_seq_lengths_kv):
        need = -(-kv_len // block_size)
        assert block_table.shape[1] >= need
        rows = block_table[i, :need].long()
        k = key[rows].reshape(-1, d)[:kv_len].float()
        v = value[rows].reshape(-1, d)[:kv_len].float()
        kr = key_rope[rows].reshape(-1, 64)[:kv_len].float()
        scores = (query[i, 0].float() @ k.T + query_rope[i, 0].float() @ kr.T) * scale
        out[i, 0] = scores.softmax(dim=-1) @ v
    return out.to(query.dtype), torch.zeros(1)
