"""A recording stand-in for `torch_npu`: documented signatures, asserted constraints.

Each function has the exact signature of the torch_npu API documentation (so a wrong argument
name or a positional use of a keyword-only argument raises `TypeError`), asserts the documented
dtype/shape/layout constraints, records the call, and computes the answer with the project's
reference or with the doc's own formula. Sources are cited per function; MoE and quant ops are in
`fake_torch_npu_moe.py`, MLA ops and the FRACTAL_NZ format calls in `fake_torch_npu_mla.py`,
DeepSeek-V4's indexer and sparse attention in `fake_torch_npu_sparse.py`.
"""

from __future__ import annotations

import math
import types
from typing import Any

import torch
import torch.nn.functional as F
from fake_torch_npu_mla import (
    get_npu_format,
    npu_format_cast_,
    npu_fused_infer_attention_score,
    npu_mla_prolog_v2,
)
from fake_torch_npu_moe import (
    npu_dynamic_quant,
    npu_moe_finalize_routing,
    npu_moe_gating_top_k,
    npu_moe_gating_top_k_softmax,
    npu_moe_init_routing,
    npu_quant_matmul,
)
from fake_torch_npu_sparse import npu_lightning_indexer, npu_sparse_flash_attention
from fake_torch_npu_util import FLOATS, HALVES, record

from npu_ops.ops import activation, attention, encoder_attention, norm


def npu_rms_norm(self: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06) -> Any:
    """torch_npu.npu_rms_norm(self, gamma, epsilon=1e-06) -> (y, rstd); Pytorch/700 ptaoplist_000860."""
    record("npu_rms_norm", self=self, gamma=gamma, epsilon=epsilon)
    assert self.dtype in FLOATS and gamma.dtype == self.dtype, (self.dtype, gamma.dtype)
    assert 1 <= self.dim() <= 8
    assert gamma.dim() == 1 and gamma.shape[0] == self.shape[-1], (gamma.shape, self.shape)
    assert isinstance(epsilon, float)
    rstd = torch.rsqrt(self.float().pow(2).mean(-1, keepdim=True) + epsilon)
    return norm.rms_norm(self, gamma, epsilon), rstd


def npu_add_rms_norm(
    x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06
) -> Any:
    """torch_npu.npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06) -> (y, rstd, x)."""
    record("npu_add_rms_norm", x1=x1, x2=x2, gamma=gamma, epsilon=epsilon)
    assert x1.dtype in FLOATS and x2.dtype == x1.dtype and gamma.dtype == x1.dtype
    assert x1.shape == x2.shape, (x1.shape, x2.shape)
    assert gamma.dim() == 1 and gamma.shape[0] == x1.shape[-1]
    x = x1 + x2
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + epsilon)
    return norm.rms_norm(x, gamma, epsilon), rstd, x


def _rotary_r_shapes(shape: torch.Size, mode: str) -> set[tuple[int, ...]]:
    """Allowed r1/r2 shapes for a 4-D input (BNSD, BSND or SBND), per the doc's constraints."""
    a, b, c, d = shape
    if mode == "interleave":
        return {(1, 1, c, d), (1, b, 1, d), (a, 1, 1, d)}
    return {
        (1, 1, c, d),
        (a, 1, c, d),
        (a, b, c, d),  # x BNSD: 11SD, B1SD, BNSD
        (1, b, 1, d),
        (a, b, 1, d),  # x BSND: 1S1D, BS1D (BSND is the full shape)
        (a, 1, 1, d),  # x SBND: S11D (SB1D is BS1D's pattern)
    }


def npu_rotary_mul(
    input: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half"
) -> torch.Tensor:
    """torch_npu.npu_rotary_mul(input, r1, r2, rotary_mode='half'); op-plugin docs."""
    record("npu_rotary_mul", input=input, r1=r1, r2=r2, rotary_mode=rotary_mode)
    assert rotary_mode in ("half", "interleave"), rotary_mode
    assert input.dim() == 4 and r1.dim() == 4 and r2.dim() == 4, "4-D tensors required"
    assert input.dtype in FLOATS and r1.dtype == input.dtype and r2.dtype == input.dtype
    assert r1.shape == r2.shape
    d = input.shape[-1]
    assert d % 2 == 0 and d < 896, f"D={d} must be even and < 896"
    assert tuple(r1.shape) in _rotary_r_shapes(input.shape, rotary_mode), (r1.shape, input.shape)
    return r1 * input + r2 * activation.rotate(input, rotary_mode)


def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch_npu.npu_swiglu(input, dim=-1); Pytorch/600 ptaoplist_000834."""
    record("npu_swiglu", input=input, dim=dim)
    assert input.dtype in FLOATS and input.is_contiguous(), "contiguous fp16/bf16/fp32 input"
    assert 1 <= input.dim() <= 8 and -input.dim() <= dim < input.dim()
    assert input.shape[dim] % 2 == 0, f"dim {dim} of {tuple(input.shape)} must be even"
    a, b = input.chunk(2, dim=dim)
    return F.silu(a) * b


def npu_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = 2147483647,
    next_tockens: int = 2147483647,
    inner_precise: int = 0,
    prefix: list[int] | None = None,
    actual_seq_qlen: list[int] | None = None,
    actual_seq_kvlen: list[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    softmax_layout: str = "",
) -> Any:
    """torch_npu.npu_fusion_attention (op-plugin docs): modelled for TND with sparse_mode=3
    (rightDownCausal, compressed mask) or sparse_mode=0 without a mask (bidirectional)."""
    record(
        "npu_fusion_attention",
        query=query,
        key=key,
        value=value,
        head_num=head_num,
        input_layout=input_layout,
        atten_mask=atten_mask,
        scale=scale,
        actual_seq_qlen=actual_seq_qlen,
        actual_seq_kvlen=actual_seq_kvlen,
        sparse_mode=sparse_mode,
    )
    assert input_layout in ("BSH", "SBH", "BSND", "BNSD", "TND"), input_layout
    assert query.dtype in FLOATS and key.dtype == query.dtype and value.dtype == query.dtype
    assert key.shape == value.shape, f"key {tuple(key.shape)} and value shapes must match"
    assert input_layout == "TND", "the stand-in models the varlen TND layout only"
    assert query.dim() == key.dim() == 3
    assert head_num == query.shape[1], (head_num, query.shape)
    assert query.shape[2] == key.shape[2] <= 768, "Dq == Dk <= 768"
    assert query.shape[1] % key.shape[1] == 0, "Nq must be a multiple of Nkv"
    assert pse is None and padding_mask is None and keep_prob == 1.0
    for name, cum, total in (
        ("actual_seq_qlen", actual_seq_qlen, query.shape[0]),
        ("actual_seq_kvlen", actual_seq_kvlen, key.shape[0]),
    ):
        assert isinstance(cum, list) and all(isinstance(v, int) for v in cum), name
        assert all(b >= a for a, b in zip([0, *cum], cum)), f"{name} must be cumulative"
        assert cum[-1] == total, f"{name} ends at {cum[-1]}, T={total}"
    assert len(actual_seq_qlen) == len(actual_seq_kvlen) <= 2048
    assert sparse_mode in (0, 3), "modelled: 0 (no mask) and 3 (rightDownCausal)"
    q_lens = [b - a for a, b in zip([0, *actual_seq_qlen], actual_seq_qlen)]
    kv_lens = [b - a for a, b in zip([0, *actual_seq_kvlen], actual_seq_kvlen)]
    if sparse_mode == 0:
        assert atten_mask is None, "modelled: sparse_mode 0 without a mask"
        cu = torch.tensor([0, *actual_seq_qlen], dtype=torch.int32)
        assert q_lens == kv_lens, "modelled: self-attention, one length per segment"
        out = encoder_attention.encoder_attention(query, key, value, cu, scale)
    else:
        assert atten_mask is not None and atten_mask.dtype == torch.bool
        assert tuple(atten_mask.shape) == (2048, 2048), "compressed 2048x2048 mask, sparse_mode 3"
        assert torch.equal(atten_mask.cpu(), torch.ones(2048, 2048, dtype=torch.bool).triu(1))
        out = attention.prefill_attention(query, key, value, q_lens, kv_lens, scale)
    stats = torch.zeros(query.shape[1], query.shape[0], 8)
    return out, stats, stats, torch.empty(0), 0, 0, 0


def npu_incre_flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    padding_mask: torch.Tensor | None = None,
    pse_shift: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    actual_seq_lengths: list[int] | None = None,
    dequant_scale1: torch.Tensor | None = None,
    quant_scale1: torch.Tensor | None = None,
    dequant_scale2: torch.Tensor | None = None,
    quant_scale2: torch.Tensor | None = None,
    quant_offset2: torch.Tensor | None = None,
    antiquant_scale: torch.Tensor | None = None,
    antiquant_offset: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    kv_padding_size: torch.Tensor | None = None,
    num_heads: int = 1,
    scale_value: float = 1.0,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    block_size: int = 0,
    inner_precise: int = 1,
) -> torch.Tensor:
    """torch_npu.npu_incre_flash_attention (op-plugin docs): modelled for page attention, BSH."""
    record(
        "npu_incre_flash_attention",
        query=query,
        key=key,
        value=value,
        actual_seq_lengths=actual_seq_lengths,
        block_table=block_table,
        num_heads=num_heads,
        scale_value=scale_value,
        input_layout=input_layout,
        num_key_value_heads=num_key_value_heads,
        block_size=block_size,
    )
    assert query.dtype in HALVES, f"query must be float16/bfloat16 on A2, got {query.dtype}"
    assert key.dtype == value.dtype and key.dtype in (*HALVES, torch.int8)
    assert key.shape == value.shape, "key and value must have the same shape"
    assert input_layout == "BSH" and query.dim() == key.dim() == 3, "BSH: 3-D query and KV"
    batch, s, hq = query.shape
    assert s == 1, "incremental decode: S == 1"
    assert hq % num_heads == 0
    head_dim = hq // num_heads
    nkv = num_key_value_heads or num_heads
    assert key.shape[2] == nkv * head_dim, (key.shape, nkv, head_dim)
    assert num_heads % nkv == 0 and num_heads // nkv <= 64
    assert batch <= 65535 and num_heads <= 256 and head_dim <= 512
    # page attention: block_table + actual_seq_lengths, KV cache (blocknum, blocksize, H)
    assert block_table is not None and block_table.dtype == torch.int32 and block_table.dim() == 2
    assert isinstance(actual_seq_lengths, list) and len(actual_seq_lengths) == batch
    assert all(isinstance(v, int) for v in actual_seq_lengths)
    assert block_size == key.shape[1] and block_size % 16 == 0, block_size
    assert block_table.shape[0] == batch
    assert block_table.shape[1] >= math.ceil(max(actual_seq_lengths) / block_size)
    cache_shape = (key.shape[0], block_size, nkv, head_dim)
    out = attention.paged_decode_attention(
        query.view(batch, num_heads, head_dim),
        key.view(cache_shape),
        value.view(cache_shape),
        block_table,
        torch.tensor(actual_seq_lengths, dtype=torch.int32),
        scale_value,
    )
    return out.view(batch, 1, hq)


ATLAS_A2_SOC_VERSION = 223


def make_module() -> types.ModuleType:
    """A fresh `torch_npu` stand-in module exposing the functions above."""
    module = types.ModuleType("torch_npu")
    # torch_npu.npu.get_soc_version(): an Atlas A2 (910B, 220-225; vllm_ascend/utils.py)
    module.npu = types.SimpleNamespace(get_soc_version=lambda: ATLAS_A2_SOC_VERSION)
    for fn in (
        npu_rms_norm,
        npu_add_rms_norm,
        npu_rotary_mul,
        npu_swiglu,
        npu_fusion_attention,
        npu_incre_flash_attention,
        npu_moe_gating_top_k,
        npu_moe_gating_top_k_softmax,
        npu_moe_init_routing,
        npu_moe_finalize_routing,
        npu_dynamic_quant,
        npu_quant_matmul,
        npu_mla_prolog_v2,
        npu_fused_infer_attention_score,
        npu_format_cast_,
        get_npu_format,
        npu_lightning_indexer,
        npu_sparse_flash_attention,
    ):
        setattr(module, fn.__name__, fn)
    return module
