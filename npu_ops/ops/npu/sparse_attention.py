"""`npu` DeepSeek-V4 attention pieces: `npu_lightning_indexer` and `npu_sparse_flash_attention`;
the compressor runs the reference.

Our ops name each query's keys by cache slot (`-1` = none, `npu_ops.ops.sparse_attention`); the
kernels take paged sequences and per-query logical positions. The mappings below are exact;
where an input cannot be mapped the op runs its reference on the device, as the MLA ops do
outside DeepSeek-V3's sizes (`npu_ops.ops.npu.mla`).

- Indexer: `torch_npu.npu_lightning_indexer(query, key, weights, *, actual_seq_lengths_query,
  actual_seq_lengths_key, block_table, layout_query="BSND", layout_key="BSND",
  sparse_count=2048, sparse_mode=3, pre_tokens=2**63-1, next_tokens=2**63-1,
  return_value=False) -> (sparse_indices, sparse_values)`: per query token the top
  `sparse_count` positions of `sum_h w_h * relu(q_h . k)` over its batch's first
  `actual_seq_lengths_key` keys, read through `block_table` (`layout_key="PA_BSND"`: key
  `[block_count, block_size, 1, D]`, block_size a multiple of 16 up to 1024); indices int32
  `[B, S1, 1, sparse_count]`, best first, `-1` past the visible keys (the page's baseline and
  op-plugin test/test_custom_ops/test_npu_lightning_indexer.py). Constraints: `D` = 128, query
  heads at most 64, one key head, query and key float16/bfloat16 of one dtype, weights that
  dtype or float32 (the page as of op-plugin 9346fd07, 2026-08; earlier pages took exactly 64
  heads and weights in the query's dtype), `sparse_count` in [1, 2048] (the newer page also
  takes 3072, 4096, ... 8192; not used here), `sparse_mode` 0 (no mask) or 3. Source: Ascend
  op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_lightning_indexer.md (older trees:
  docs/context/torch_npu-npu_lightning_indexer.md).

  Mapping: every query is a batch of its own (`B = T`, `S1 = 1`, `sparse_mode=0`: its visible
  entries are already causal), `actual_seq_lengths_key` = its visible entries. The engine's
  visible entries of a query are entries `0 .. n-1` of its sequence, `block_size // 4` to a
  cache block (`engine.deepseek_v4.step_indices`), so the indexer cache viewed as pages of `P`
  rows is a paged sequence with block table `entry_slots[:, ::P] // P` for any `P` that
  divides the per-block count. The largest such `P` (a multiple of 16 up to 1024) is found on
  the device and read back once (one host sync, as the MLA decode's `seq_lens.tolist()`);
  without one (slots that are not per-query prefixes of aligned pages, or fewer than 16
  entries to a cache block) the reference runs. The kernel takes no scale: `scale` > 0 scales
  every score alike, so it is folded into the float32 weights. Indices come back as positions
  and are mapped to slots.
- Attention: `torch_npu.npu_sparse_flash_attention(query, key, value, sparse_indices,
  scale_value, *, block_table=None, actual_seq_lengths_query=None, actual_seq_lengths_kv=None,
  query_rope=None, key_rope=None, sparse_block_size=1, layout_query="BSND", layout_kv="BSND",
  sparse_mode=3, pre_tokens=2**63-1, next_tokens=2**63-1, attention_mode=0,
  return_softmax_lse=False, sinks=None) -> (attention_out, softmax_max, softmax_sum)`: softmax
  of `scale_value * ([q, q_rope] . [k, k_rope])` over the keys `sparse_indices` names (valid
  entries first, `-1` after), times the value; `attention_mode=2` (MLA-absorb, the only mode)
  with key and value one tensor, query/key `D` = 512 and `query_rope`/`key_rope` 64, query
  heads 1, 2, 4, ... 128, one KV head, float16/bfloat16, contiguous key/value/key_rope on
  Atlas A2/A3. `sinks` (float32 `[N1]`) exist on Ascend 950 only ("Atlas A3 推理系列产品/Atlas
  A2 推理系列产品: 不支持sinks"). Source: Ascend op-plugin
  docs/zh/custom_APIs/torch_npu/torch_npu-npu_sparse_flash_attention.md and
  test/test_custom_ops/test_npu_sparse_flash_attention.py (golden: value = key).

  Mapping: V4's key is its own value, a 512-wide vector (448 NoPE + 64 RoPE), so it is
  `key` = `value` whole and the kernel's rope slices carry the sink instead: each chunk of
  queries gathers its window and compressed keys (as the reference does) into one `BSND`
  sequence per query plus a sink key whose K=V part is zero and whose rope part is
  `(1, 1, 0, ...)`; every query head's `query_rope` is `(hi, lo, 0, ...)` with
  `hi + lo = sink_h / scale` (split over two bfloat16 values to keep the sink's precision), so
  the sink key's logit is `sink_h`, every other key's rope product is 0, and the sink takes
  softmax mass and adds no value: exactly the reference's sink. This works on A2/A3 without
  the `sinks` input. Keys of both caches must share the query's dtype; other head sizes, head
  counts or dtypes run the reference.
- Compressor (`kv_compress`): the reference's aten ops on the device. No torch_npu API pools
  windows; vLLM-Ascend's `Compressor` custom op (csrc/attention/compressor/README.md, PR
  #8648) fuses the `kv_proj`/`gate_proj` matmuls, the pooling, RMSNorm and RoPE (rope dim 64
  only) and keeps its own float32 state per request, is not a torch_npu API, and lists Atlas
  A2 as unsupported; our op pools per-token state that the engine writes itself
  (`engine.deepseek_v4.attention`), so nothing maps onto it. The same holds for SGLang's and
  vLLM-Ascend's `npu_sparse_attn_sharedkv` (custom ops outside torch_npu, taking block tables
  and sequence lengths where our op takes slots, window 128, 64 heads and top-k 512 only).
"""

from __future__ import annotations

import torch

from npu_ops.ops import sparse_attention as reference
from npu_ops.ops.npu.module import torch_npu

HALVES = (torch.float16, torch.bfloat16)

INDEXER_DIM = 128
INDEXER_MAX_HEADS = 64
INDEXER_MAX_COUNT = 2048
PAGE_SIZES = (1024, 512, 256, 128, 64, 32, 16)
"""Block sizes `npu_lightning_indexer` takes (multiples of 16 up to 1024), largest first; the
powers of two among them, so that a page of the engine's cache is a whole number of them."""

ATTENTION_DIM = 512
ATTENTION_ROPE = 64
ATTENTION_HEADS = frozenset({1, 2, 4, 8, 16, 32, 64, 128})
MLA_ABSORB = 2
"""`attention_mode` of `npu_sparse_flash_attention` (the only one it takes)."""


def kv_compress(
    state_kv: torch.Tensor,
    state_gate: torch.Tensor,
    window_slots: torch.Tensor,
    position_bias: torch.Tensor,
    overlap: bool,
) -> torch.Tensor:
    """The reference on the device (no torch_npu op pools windows: see the module docstring);
    see `npu_ops.ops.sparse_attention.kv_compress` for shapes."""
    return reference.kv_compress(state_kv, state_gate, window_slots, position_bias, overlap)


def page_size(entry_slots: torch.Tensor, rows: int) -> int | None:
    """The largest `P` in `PAGE_SIZES` for which `entry_slots` reads a paged cache of `rows`
    rows as pages of `P`: each row's valid slots a prefix, and slots `j` of a row
    `base + j % P` with `base` (the slot of the page's first entry) a multiple of `P`. None if
    no `P` fits. Reads one small tensor back to the host."""
    n = entry_slots.shape[1]
    valid = entry_slots >= 0
    j = torch.arange(n, device=entry_slots.device)
    prefix = valid == (j[None, :] < valid.sum(dim=1, keepdim=True))
    checks = [prefix.all()]
    sizes = [p for p in PAGE_SIZES if rows % p == 0]
    for p in sizes:
        base = entry_slots[:, j - j % p]
        ok = (entry_slots == base + j % p) & (base % p == 0)
        checks.append((ok | ~valid).all())
    flags = torch.stack(checks).tolist()
    if not flags[0]:
        return None
    return next((p for p, fits in zip(sizes, flags[1:], strict=True) if fits), None)


def lightning_indexer(
    query: torch.Tensor,
    weights: torch.Tensor,
    key_cache: torch.Tensor,
    entry_slots: torch.Tensor,
    top_k: int,
    scale: float,
) -> torch.Tensor:
    """`npu_lightning_indexer` where its constraints hold and the slots are paged, else the
    reference; see `npu_ops.ops.sparse_attention.lightning_indexer` for shapes."""
    tokens, n = entry_slots.shape
    keep = min(top_k, n)
    heads, dim = query.shape[1:]
    fits = (
        tokens > 0
        and 1 <= keep <= INDEXER_MAX_COUNT
        and query.dtype in HALVES
        and key_cache.dtype == query.dtype
        and dim == INDEXER_DIM
        and key_cache.shape[1] == dim
        and heads <= INDEXER_MAX_HEADS
    )
    page = page_size(entry_slots, key_cache.shape[0]) if fits else None
    if page is None:
        return reference.lightning_indexer(query, weights, key_cache, entry_slots, top_k, scale)
    counts = (entry_slots >= 0).sum(dim=1).to(torch.int32)
    table = (entry_slots[:, ::page].clamp(min=0) // page).to(torch.int32)
    indices, _ = torch_npu().npu_lightning_indexer(
        query.contiguous().view(tokens, 1, heads, dim),
        key_cache.view(-1, page, 1, dim),
        (weights.float() * scale).contiguous().view(tokens, 1, heads),
        actual_seq_lengths_query=torch.ones(tokens, dtype=torch.int32, device=query.device),
        actual_seq_lengths_key=counts,
        block_table=table,
        layout_query="BSND",
        layout_key="PA_BSND",
        sparse_count=keep,
        sparse_mode=0,
    )
    positions = indices.view(tokens, keep).long()
    picked = entry_slots.gather(1, positions.clamp(min=0))
    return picked.masked_fill(positions < 0, -1)


def _sink_query_rope(
    sinks: torch.Tensor, scale: float, tokens: int, dtype: torch.dtype
) -> torch.Tensor:
    """`[t, 1, H, 64]`: `(hi, lo, 0, ...)` per head with `hi + lo = sink / scale` in `dtype`."""
    target = sinks.float() / scale
    hi = target.to(dtype)
    lo = (target - hi.float()).to(dtype)
    rope = torch.zeros(tokens, 1, sinks.shape[0], ATTENTION_ROPE, dtype=dtype, device=sinks.device)
    rope[..., 0] = hi
    rope[..., 1] = lo
    return rope


def sparse_shared_kv_attention(
    query: torch.Tensor,
    window_cache: torch.Tensor,
    window_slots: torch.Tensor,
    compressed_cache: torch.Tensor | None,
    compressed_slots: torch.Tensor | None,
    sinks: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """`npu_sparse_flash_attention` over each query's gathered keys plus a sink key where its
    constraints hold, else the reference; see
    `npu_ops.ops.sparse_attention.sparse_shared_kv_attention` for shapes."""
    tokens, heads, dim = query.shape
    compressed = compressed_cache is not None and compressed_slots is not None
    caches = (window_cache, compressed_cache) if compressed else (window_cache,)
    fits = (
        tokens > 0
        and query.dtype in HALVES
        and all(c is not None and c.dtype == query.dtype for c in caches)
        and dim == ATTENTION_DIM
        and heads in ATTENTION_HEADS
    )
    if not fits:
        return reference.sparse_shared_kv_attention(
            query, window_cache, window_slots, compressed_cache, compressed_slots, sinks, scale
        )
    npu = torch_npu()
    out = torch.empty_like(query)
    for lo in range(0, tokens, reference.QUERY_CHUNK):
        hi = lo + reference.QUERY_CHUNK
        slots = window_slots[lo:hi]
        keys = [window_cache[slots.clamp(min=0)]]
        valid = [slots >= 0]
        if compressed:
            assert compressed_cache is not None and compressed_slots is not None
            c = compressed_slots[lo:hi]
            keys.append(compressed_cache[c.clamp(min=0)])
            valid.append(c >= 0)
        t, width = slots.shape[0], sum(v.shape[1] for v in valid)
        keys.append(query.new_zeros(t, 1, dim))  # the sink key: K = V = 0
        valid.append(torch.ones(t, 1, dtype=torch.bool, device=query.device))
        kv = torch.cat(keys, dim=1).view(t, width + 1, 1, dim)
        key_rope = query.new_zeros(t, width + 1, 1, ATTENTION_ROPE)
        key_rope[:, width, 0, :2] = 1
        positions = torch.arange(width + 1, device=query.device).expand(t, -1)
        order = torch.where(torch.cat(valid, dim=1), positions, width + 1).sort(dim=1).values
        indices = order.masked_fill(order > width, -1).to(torch.int32)
        chunk, _, _ = npu.npu_sparse_flash_attention(
            query[lo:hi].contiguous().view(t, 1, heads, dim),
            kv,
            kv,
            indices.view(t, 1, 1, width + 1),
            scale,
            actual_seq_lengths_query=torch.ones(t, dtype=torch.int32, device=query.device),
            actual_seq_lengths_kv=torch.full(
                (t,), width + 1, dtype=torch.int32, device=query.device
            ),
            query_rope=_sink_query_rope(sinks, scale, t, query.dtype),
            key_rope=key_rope,
            sparse_block_size=1,
            layout_query="BSND",
            layout_kv="BSND",
            sparse_mode=0,
            attention_mode=MLA_ABSORB,
        )
        out[lo:hi] = chunk.view(t, heads, dim)
    return out
