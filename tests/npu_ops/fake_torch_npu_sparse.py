"""Recording stand-ins for torch_npu's DeepSeek sparse-attention kernels.

Same contract as `fake_torch_npu.py`: the documented signatures, the documented constraints
asserted (Atlas A2/A3), answers from the op pages' own formulas and baselines (written here
independently of `npu_ops.ops.sparse_attention`). Sources: Ascend op-plugin
docs/zh/custom_APIs/torch_npu/torch_npu-npu_lightning_indexer.md with the baseline of
test/test_custom_ops/test_npu_lightning_indexer.py, and
docs/zh/custom_APIs/torch_npu/torch_npu-npu_sparse_flash_attention.md with
test/test_custom_ops/test_npu_sparse_flash_attention.py.
"""

from __future__ import annotations

from typing import Any

import torch
from fake_torch_npu_util import HALVES, record

MAX_INT64 = 2**63 - 1
SPARSE_COUNTS = set(range(1, 2049)) | {3072, 4096, 5120, 6144, 7168, 8192}
SFA_HEADS = (1, 2, 4, 8, 16, 32, 64, 128)


def _int32_vector(t: torch.Tensor | None, batch: int, name: str) -> None:
    assert t is not None, f"{name} is required here"
    assert t.dtype == torch.int32 and tuple(t.shape) == (batch,), (name, t.dtype, t.shape)


def npu_lightning_indexer(
    query: torch.Tensor,
    key: torch.Tensor,
    weights: torch.Tensor,
    *,
    actual_seq_lengths_query: torch.Tensor | None = None,
    actual_seq_lengths_key: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    layout_query: str = "BSND",
    layout_key: str = "BSND",
    sparse_count: int = 2048,
    sparse_mode: int = 3,
    pre_tokens: int = MAX_INT64,
    next_tokens: int = MAX_INT64,
    return_value: bool = False,
) -> Any:
    """torch_npu.npu_lightning_indexer, modelled for a BSND query over a PA_BSND key."""
    record(
        "npu_lightning_indexer",
        query=query,
        key=key,
        weights=weights,
        actual_seq_lengths_query=actual_seq_lengths_query,
        actual_seq_lengths_key=actual_seq_lengths_key,
        block_table=block_table,
        layout_query=layout_query,
        layout_key=layout_key,
        sparse_count=sparse_count,
        sparse_mode=sparse_mode,
    )
    assert layout_query in ("BSND", "TND") and layout_key in ("PA_BSND", "BSND", "TND")
    assert layout_query == "BSND" and layout_key == "PA_BSND", "modelled: BSND over PA_BSND"
    assert query.dtype in HALVES and key.dtype == query.dtype, (query.dtype, key.dtype)
    assert weights.dtype == torch.float32 or weights.dtype == query.dtype, weights.dtype
    assert query.is_contiguous() and weights.is_contiguous(), "no non-contiguous query/weights"
    assert query.dim() == 4 and key.dim() == 4, "BSND query, PA_BSND key"
    b, s1, n1, d = query.shape
    blocks, block_size, n2, dk = key.shape
    assert d == dk == 128, f"query and key D must be 128, got {d} and {dk}"
    assert n1 <= 64 and n2 == 1, (n1, n2)
    assert block_size % 16 == 0 and block_size <= 1024, block_size
    assert tuple(weights.shape) == (b, s1, n1), weights.shape
    assert sparse_count in SPARSE_COUNTS, sparse_count
    assert sparse_mode in (0, 3), sparse_mode
    assert pre_tokens == MAX_INT64 and next_tokens == MAX_INT64, "only the defaults"
    assert not return_value, "return_value: training, and not with PA_BSND"
    _int32_vector(actual_seq_lengths_key, b, "actual_seq_lengths_key (PA_BSND)")
    assert actual_seq_lengths_key is not None
    q_lens = [s1] * b
    if actual_seq_lengths_query is not None:
        _int32_vector(actual_seq_lengths_query, b, "actual_seq_lengths_query")
        q_lens = actual_seq_lengths_query.tolist()
        assert all(0 <= n <= s1 for n in q_lens), q_lens
    assert block_table is not None and block_table.dtype == torch.int32 and block_table.dim() == 2
    assert block_table.shape[0] == b, (block_table.shape, b)
    k_lens = actual_seq_lengths_key.tolist()
    assert all(n >= 0 for n in k_lens)
    assert block_table.shape[1] >= -(-max(k_lens) // block_size), "table too narrow"
    out = torch.full((b, s1, 1, sparse_count), -1, dtype=torch.int32)
    for i in range(b):
        n = k_lens[i]
        need = -(-n // block_size)
        keys = key[block_table[i, :need].long()].reshape(-1, d)[:n].float()  # [S2, D]
        q = query[i, : q_lens[i]].float()  # [S1, N1, D]
        scores = torch.einsum("snd,kd->snk", q, keys).clamp(min=0)
        scores = (scores * weights[i, : q_lens[i]].float()[..., None]).sum(dim=1)  # [S1, S2]
        if sparse_mode == 3:  # rightDownCausal: query row r sees keys < n - (S1 - 1 - r)
            for r in range(q_lens[i]):
                scores[r, n - (q_lens[i] - 1 - r) :] = float("-inf")
        keep = min(sparse_count, n)
        order = scores.sort(dim=1, descending=True, stable=True).indices[:, :keep]
        out[i, : q_lens[i], 0, :keep] = order.to(torch.int32)
    return out, torch.empty(0, dtype=query.dtype)


def npu_sparse_flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    sparse_indices: torch.Tensor,
    scale_value: float,
    *,
    block_table: torch.Tensor | None = None,
    actual_seq_lengths_query: torch.Tensor | None = None,
    actual_seq_lengths_kv: torch.Tensor | None = None,
    query_rope: torch.Tensor | None = None,
    key_rope: torch.Tensor | None = None,
    sparse_block_size: int = 1,
    layout_query: str = "BSND",
    layout_kv: str = "BSND",
    sparse_mode: int = 3,
    pre_tokens: int = 9223372036854775807,
    next_tokens: int = 9223372036854775807,
    attention_mode: int = 0,
    return_softmax_lse: bool = False,
    sinks: torch.Tensor | None = None,
) -> Any:
    """torch_npu.npu_sparse_flash_attention, modelled for BSND query and key, token-wise
    indices (`sparse_block_size=1`) and `sparse_mode=0`, on Atlas A2/A3 (no `sinks`)."""
    record(
        "npu_sparse_flash_attention",
        query=query,
        key=key,
        value=value,
        sparse_indices=sparse_indices,
        scale_value=scale_value,
        block_table=block_table,
        actual_seq_lengths_query=actual_seq_lengths_query,
        actual_seq_lengths_kv=actual_seq_lengths_kv,
        query_rope=query_rope,
        key_rope=key_rope,
        sparse_block_size=sparse_block_size,
        layout_query=layout_query,
        layout_kv=layout_kv,
        sparse_mode=sparse_mode,
        attention_mode=attention_mode,
        same_key_value=key is value,
    )
    assert layout_query in ("BSND", "TND") and layout_kv in ("BSND", "TND", "PA_BSND")
    assert layout_query == layout_kv == "BSND", "modelled: BSND (not paged)"
    assert block_table is None, "no block_table without PA_BSND"
    assert attention_mode == 2, "attention_mode: only 2 (MLA-absorb)"
    assert sinks is None, "Atlas A2/A3: sinks not supported"
    assert not return_softmax_lse, "return_softmax_lse: training only"
    assert pre_tokens == MAX_INT64 and next_tokens == MAX_INT64, "only the defaults"
    assert sparse_block_size == 1, "modelled: token-wise indices"
    assert sparse_mode == 0, "modelled: no causal mask on top of the indices"
    assert query_rope is not None and key_rope is not None, "MLA-absorb: rope inputs"
    assert query.dtype in HALVES, query.dtype
    assert all(t.dtype == query.dtype for t in (key, value, query_rope, key_rope))
    for name, t in (("query", query), ("key", key), ("value", value), ("key_rope", key_rope)):
        assert t.is_contiguous(), f"{name}: no non-contiguous tensors on A2/A3"
    assert query_rope.is_contiguous() and sparse_indices.is_contiguous()
    assert query.dim() == key.dim() == 4, "BSND"
    b, s1, n1, d = query.shape
    _, s2, n2, dk = key.shape
    assert d == dk == 512 and query_rope.shape[-1] == key_rope.shape[-1] == 64, "D 512, rope 64"
    assert n1 in SFA_HEADS and n2 == 1, (n1, n2)
    assert key.shape == value.shape and key.shape[0] == b
    assert tuple(query_rope.shape) == (b, s1, n1, 64), query_rope.shape
    assert tuple(key_rope.shape) == (b, s2, 1, 64), key_rope.shape
    assert sparse_indices.dtype == torch.int32 and sparse_indices.dim() == 4
    assert tuple(sparse_indices.shape[:3]) == (b, s1, 1) and sparse_indices.shape[3] > 0
    q_lens, kv_lens = [s1] * b, [s2] * b
    if actual_seq_lengths_query is not None:
        _int32_vector(actual_seq_lengths_query, b, "actual_seq_lengths_query")
        q_lens = actual_seq_lengths_query.tolist()
    if actual_seq_lengths_kv is not None:
        _int32_vector(actual_seq_lengths_kv, b, "actual_seq_lengths_kv")
        kv_lens = actual_seq_lengths_kv.tolist()
    assert all(0 <= n <= s1 for n in q_lens) and all(0 <= n <= s2 for n in kv_lens)
    out = torch.zeros(b, s1, n1, d)
    for i in range(b):
        for s in range(q_lens[i]):
            row = sparse_indices[i, s, 0]
            valid = row >= 0
            count = int(valid.sum())
            assert bool(valid[:count].all()), "valid indices first, -1 after"
            idx = row[:count].long()
            idx = idx[idx < kv_lens[i]]
            k = key[i, idx, 0].float()
            v = value[i, idx, 0].float()
            kr = key_rope[i, idx, 0].float()
            logits = (query[i, s].float() @ k.T + query_rope[i, s].float() @ kr.T) * scale_value
            out[i, s] = logits.softmax(dim=-1) @ v
    empty = torch.empty(0)
    return out.to(query.dtype), empty, empty
