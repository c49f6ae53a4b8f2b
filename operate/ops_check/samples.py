"""Realistic inputs for every op, for the op preflight (`ascend-router ops-check`).

`build_case` builds one op's arguments at the sizes of an `OpShapes`
(`operate.ops_check.shapes`). Inputs are built on the host from a seeded generator, so every
implementation and the reference see the same numbers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from npu_ops.ops import moe_routing
from operate.ops_check.shapes import OpShapes

HALF_DTYPES = (torch.float16, torch.bfloat16)
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which Whisper's encoder keeps


@dataclass(frozen=True)
class OpCase:
    """Positional arguments of one op call, all tensors on the host."""

    args: tuple[Any, ...]

    def to(self, device: torch.device) -> OpCase:
        """The same arguments with every tensor moved to `device`."""
        return OpCase(tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in self.args))


def _randn(g: torch.Generator, *shape: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _rope(s: OpShapes, tokens: int, dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin `[T, D]` in the "half" layout for positions 0..T-1 (transformers' RoPE); `D` is
    `dim`, else the K head size."""
    d = dim or s.k_head_dim
    inv_freq = 1.0 / (s.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(tokens, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(s.dtype), emb.sin().to(s.dtype)


def _topk_ids(g: torch.Generator, tokens: int, experts: int, k: int) -> torch.Tensor:
    return torch.rand(tokens, experts, generator=g).topk(k, dim=-1).indices.to(torch.int32)


def _block_table(g: torch.Generator, lens: tuple[int, ...], block_size: int) -> torch.Tensor:
    need = [-(-n // block_size) for n in lens]
    width = max(need)
    blocks = torch.randperm(sum(need) + 3, generator=g).to(torch.int32)
    table = torch.zeros(len(lens), width, dtype=torch.int32)
    start = 0
    for row, n in enumerate(need):
        table[row, :n] = blocks[start : start + n]
        start += n
    return table


def build_case(op: str, s: OpShapes, seed: int = 0) -> OpCase:
    """Inputs of `op` at shapes `s` (see `npu_ops.ops.catalog` for each op's signature).

    Raises:
        ValueError: unknown op.
    """
    g = torch.Generator().manual_seed(seed)
    t, h, dt = s.num_tokens, s.hidden_size, s.dtype
    half = dt if dt in HALF_DTYPES else torch.bfloat16  # W8A8 ops take float16/bfloat16
    builders: dict[str, Callable[[], tuple[Any, ...]]] = {
        "rms_norm": lambda: (_randn(g, t, h, dtype=dt), _randn(g, h, dtype=dt), s.rms_norm_eps),
        "add_rms_norm": lambda: (
            _randn(g, t, h, dtype=dt),
            _randn(g, t, h, dtype=dt),
            _randn(g, h, dtype=dt),
            s.rms_norm_eps,
        ),
        "layer_norm": lambda: (
            _randn(g, t, h, dtype=dt),
            _randn(g, h, dtype=dt),
            _randn(g, h, dtype=dt),
            LAYER_NORM_EPS,
        ),
        "rotary_embedding": lambda: (
            _randn(g, t, s.num_heads, s.k_head_dim, dtype=dt),
            *_rope(s, t),
            "half",
        ),
        "swiglu": lambda: (_randn(g, t, 2 * s.intermediate_size, dtype=dt),),
        "prefill_attention": lambda: (
            _randn(g, sum(s.prefill_q_lens), s.num_heads, s.k_head_dim, dtype=dt),
            _randn(g, sum(s.prefill_kv_lens), s.num_kv_heads, s.k_head_dim, dtype=dt),
            _randn(g, sum(s.prefill_kv_lens), s.num_kv_heads, s.v_head_dim, dtype=dt),
            list(s.prefill_q_lens),
            list(s.prefill_kv_lens),
            s.k_head_dim**-0.5,
        ),
        "paged_decode_attention": lambda: _decode_case(g, s),
        "encoder_attention": lambda: _encoder_attention_case(g, s),
        "moe_grouped_topk": lambda: (
            _randn(g, t, s.num_experts, dtype=torch.float32),
            _randn(g, s.num_experts, dtype=torch.float32, scale=0.1),
            s.top_k,
            s.num_groups,
            s.topk_groups,
            s.routed_scaling_factor,
        ),
        "moe_topk_softmax": lambda: (
            _randn(g, t, s.softmax_experts, dtype=torch.float32),
            s.softmax_top_k,
        ),
        "moe_dispatch": lambda: (
            _randn(g, t, h, dtype=dt),
            _topk_ids(g, t, s.softmax_experts, s.softmax_top_k),
            s.softmax_experts,
        ),
        "moe_combine": lambda: _combine_case(g, s),
        "dynamic_quant": lambda: (_randn(g, t, h, dtype=half),),
        "quant_matmul": lambda: (
            torch.randint(-128, 128, (t, h), generator=g, dtype=torch.int8),
            torch.randint(-128, 128, (h, h), generator=g, dtype=torch.int8),  # o_proj-sized
            torch.rand(h, generator=g) * 1e-3,
            torch.rand(t, generator=g) * 1e-2,
            half,
        ),
        "fp8_block_matmul": lambda: (
            _randn(g, t, h, dtype=dt),
            _randn(g, h, h, dtype=torch.float32).to(torch.float8_e4m3fn),
            torch.rand(-(-h // 128), -(-h // 128), generator=g) * 1e-2,
            (128, 128),
        ),
        "mxfp4_matmul": lambda: (
            _randn(g, t, h, dtype=dt),
            torch.randint(0, 256, (h, h // 2), generator=g, dtype=torch.uint8),
            torch.full((h, -(-h // 32)), 2.0**-6).to(torch.float8_e8m0fnu),
        ),
        "mxfp4_grouped_matmul": lambda: (
            _randn(g, t, h, dtype=dt),
            torch.randint(0, 256, (2, h, h // 2), generator=g, dtype=torch.uint8),
            torch.full((2, h, -(-h // 32)), 2.0**-6).to(torch.float8_e8m0fnu),
            torch.tensor([t // 2, t - t // 2]),  # two experts' rows
        ),
        "grouped_lora": lambda: _lora_case(g, s),
        "mla_prolog": lambda: _mla_prolog_case(g, s),
        "mla_decode_attention": lambda: _mla_decode_case(g, s),
        "kv_compress": lambda: _kv_compress_case(g, s),
        "lightning_indexer": lambda: _indexer_case(g, s),
        "sparse_shared_kv_attention": lambda: _sparse_attention_case(g, s),
    }
    if op not in builders:
        raise ValueError(f"no preflight inputs for op {op!r}")
    return OpCase(builders[op]())


def _encoder_attention_case(g: torch.Generator, s: OpShapes) -> tuple[Any, ...]:
    """Segments of the prefill query lengths (images or clips), as one flattened batch."""
    lens = s.prefill_q_lens
    tokens = sum(lens)
    q, k, v = (_randn(g, tokens, s.num_heads, s.k_head_dim, dtype=s.dtype) for _ in range(3))
    cu_seqlens = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32)
    return q, k, v, cu_seqlens, s.k_head_dim**-0.5


def _decode_case(g: torch.Generator, s: OpShapes) -> tuple[Any, ...]:
    table = _block_table(g, s.decode_lens, s.block_size)
    num_blocks = int(table.max()) + 4
    cache = (num_blocks, s.block_size, s.num_kv_heads)
    return (
        _randn(g, len(s.decode_lens), s.num_heads, s.k_head_dim, dtype=s.dtype),
        _randn(g, *cache, s.k_head_dim, dtype=s.dtype),
        _randn(g, *cache, s.v_head_dim, dtype=s.dtype),
        table,
        torch.tensor(s.decode_lens, dtype=torch.int32),
        s.k_head_dim**-0.5,
    )


def _combine_case(g: torch.Generator, s: OpShapes) -> tuple[Any, ...]:
    t, k = s.num_tokens, s.softmax_top_k
    ids = _topk_ids(g, t, s.softmax_experts, k)
    _, row_idx, _ = moe_routing.moe_dispatch(torch.zeros(t, 1), ids, s.softmax_experts)
    weights = torch.rand(t, k, generator=g).softmax(dim=-1).to(s.dtype)
    return (_randn(g, t * k, s.hidden_size, dtype=s.dtype), row_idx, weights, ids)


def _lora_case(g: torch.Generator, s: OpShapes) -> tuple[Any, ...]:
    """Adapters 1, 2 and 3 of ranks 8, 16 and 64 stacked over a q projection; base rows (id 0)
    between their rows."""
    t, h, dt = s.num_tokens, s.hidden_size, s.dtype
    out = s.num_heads * s.k_head_dim
    ranks, bounds = (8, 16, 64), ((1, t // 4), (t // 4, t // 2), (t // 2 + 3, t))
    row_ids = torch.zeros(t, dtype=torch.int64)
    for i, (start, stop) in enumerate(bounds):
        row_ids[start:stop] = i + 1
    col_ids = torch.cat([torch.full((r,), i + 1, dtype=torch.int64) for i, r in enumerate(ranks)])
    return (
        _randn(g, t, out, dtype=dt),
        _randn(g, t, h, dtype=dt),
        torch.cat([_randn(g, r, h, dtype=dt, scale=h**-0.5) for r in ranks]),
        torch.cat([_randn(g, r, out, dtype=dt, scale=r**-0.5) for r in ranks]),
        row_ids,
        col_ids,
        torch.tensor([[0, out]]).expand(sum(ranks), 2).contiguous(),
    )


def _mla_prolog_case(g: torch.Generator, s: OpShapes) -> tuple[Any, ...]:
    """`num_tokens` tokens written to scattered slots of a paged latent cache."""
    t, he, n, dt = s.num_tokens, s.mla_hidden_size, s.mla_heads, s.dtype
    d, dr, latent, q_rank = s.qk_nope_head_dim, s.qk_rope_head_dim, s.kv_lora_rank, s.q_lora_rank
    num_blocks = -(-t // s.block_size) + 2
    q_in = q_rank or he
    cos, sin = _rope(s, t, dr)
    return (
        _randn(g, t, he, dtype=dt),
        None if q_rank is None else _randn(g, he, q_rank, dtype=dt, scale=he**-0.5),
        _randn(g, q_in, n * (d + dr), dtype=dt, scale=q_in**-0.5),
        _randn(g, n, d, latent, dtype=dt, scale=d**-0.5),
        _randn(g, he, latent + dr, dtype=dt, scale=he**-0.5),
        None if q_rank is None else 1 + _randn(g, q_rank, dtype=dt, scale=0.1),
        1 + _randn(g, latent, dtype=dt, scale=0.1),
        sin,
        cos,
        torch.randperm(num_blocks * s.block_size, generator=g)[:t],
        _randn(g, num_blocks, s.block_size, 1, latent, dtype=dt),
        _randn(g, num_blocks, s.block_size, 1, dr, dtype=dt),
        s.rms_norm_eps,
        s.rms_norm_eps,
        True,
    )


def _mla_decode_case(g: torch.Generator, s: OpShapes) -> tuple[Any, ...]:
    table = _block_table(g, s.decode_lens, s.block_size)
    num_blocks = int(table.max()) + 4
    batch, latent, dr = len(s.decode_lens), s.kv_lora_rank, s.qk_rope_head_dim
    return (
        _randn(g, batch, s.mla_heads, latent, dtype=s.dtype),
        _randn(g, batch, s.mla_heads, dr, dtype=s.dtype),
        _randn(g, num_blocks, s.block_size, 1, latent, dtype=s.dtype),
        _randn(g, num_blocks, s.block_size, 1, dr, dtype=s.dtype),
        table,
        torch.tensor(s.decode_lens, dtype=torch.int32),
        (s.qk_nope_head_dim + dr) ** -0.5,
    )


@dataclass(frozen=True)
class _V4Layout:
    """The paged cache of the `decode_lens` sequences and the step's query tokens."""

    table: torch.Tensor  # [S, blocks] int64 block table
    num_blocks: int
    seq: torch.Tensor  # [T] each query's sequence
    pos: torch.Tensor  # [T] each query's position
    block_size: int
    ratio: int

    def token_slots(self, seq: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Slots of positions `pos` of sequences `seq`, `-1` where `pos < 0`."""
        p = pos.clamp(min=0)
        slots = self.table[seq, p // self.block_size] * self.block_size + p % self.block_size
        return slots.masked_fill(pos < 0, -1)

    def entry_slots(self, seq: torch.Tensor, entry: torch.Tensor) -> torch.Tensor:
        """Slots of compressed entries `entry` of sequences `seq` (`block_size // ratio` a
        block), `-1` where `entry < 0`."""
        per_block = max(1, self.block_size // self.ratio)
        e = entry.clamp(min=0)
        slots = self.table[seq, e // per_block] * per_block + e % per_block
        return slots.masked_fill(entry < 0, -1)

    def visible(self) -> torch.Tensor:
        """`[T, N]` each query's visible entries `j < (p + 1) // ratio`, `-1` padded."""
        count = (self.pos + 1) // self.ratio
        j = torch.arange(int(count.max()))[None, :].expand(len(self.pos), -1)
        entries = j.masked_fill(j >= count[:, None], -1)
        return self.entry_slots(self.seq[:, None].expand_as(j), entries)


def _v4_layout(g: torch.Generator, s: OpShapes) -> _V4Layout:
    lens = s.decode_lens
    table = _block_table(g, lens, s.block_size).long()
    seq = torch.cat([torch.full((min(n, 3),), i) for i, n in enumerate(lens)])
    pos = torch.cat([torch.arange(max(n - 3, 0), n) for n in lens])
    return _V4Layout(table, int(table.max()) + 4, seq, pos, s.block_size, s.v4_compress_ratio)


def _kv_compress_case(g: torch.Generator, s: OpShapes) -> tuple[Any, ...]:
    """The last (up to) four windows of each sequence, overlapping (ratio-4 layers): window
    `j` pools tokens `ratio * (j - 1) .. ratio * (j + 1) - 1`, those before 0 absent."""
    lay, r = _v4_layout(g, s), s.v4_compress_ratio
    windows = [
        (i, j) for i, n in enumerate(s.decode_lens) for j in range(max(n // r - 4, 0), n // r)
    ]
    seq = torch.tensor([i for i, _ in windows])
    first = torch.tensor([r * (j - 1) for _, j in windows])
    pos = first[:, None] + torch.arange(2 * r)[None, :]
    width = 2 * s.v4_head_dim
    rows = lay.num_blocks * s.block_size
    return (
        _randn(g, rows, width, dtype=s.dtype),
        _randn(g, rows, width, dtype=s.dtype),
        lay.token_slots(seq[:, None].expand_as(pos), pos),
        _randn(g, r, width, dtype=torch.float32),
        True,
    )


def _indexer_case(g: torch.Generator, s: OpShapes) -> tuple[Any, ...]:
    lay = _v4_layout(g, s)
    t, hi, di = len(lay.pos), s.v4_index_heads, s.v4_index_head_dim
    entries = lay.num_blocks * max(1, s.block_size // s.v4_compress_ratio)
    return (
        _randn(g, t, hi, di, dtype=s.dtype),
        _randn(g, t, hi, dtype=torch.float32, scale=hi**-0.5),
        _randn(g, entries, di, dtype=s.dtype),
        lay.visible(),
        s.v4_index_topk,
        di**-0.5,
    )


def _sparse_attention_case(g: torch.Generator, s: OpShapes) -> tuple[Any, ...]:
    """Each query's raw window and a random choice of `index_topk` of its visible entries."""
    lay = _v4_layout(g, s)
    t, h, d = len(lay.pos), s.v4_heads, s.v4_head_dim
    back = torch.arange(s.v4_sliding_window - 1, -1, -1)
    window = lay.pos[:, None] - back[None, :]
    visible = lay.visible()
    keep = min(s.v4_index_topk, visible.shape[1])
    score = torch.rand(visible.shape, generator=g).masked_fill(visible < 0, -1.0)
    chosen = visible.gather(1, score.topk(keep, dim=1).indices)
    entries = lay.num_blocks * max(1, s.block_size // s.v4_compress_ratio)
    return (
        _randn(g, t, h, d, dtype=s.dtype),
        _randn(g, lay.num_blocks * s.block_size, d, dtype=s.dtype),
        lay.token_slots(lay.seq[:, None].expand_as(window), window),
        _randn(g, entries, d, dtype=s.dtype),
        chosen,
        _randn(g, h, dtype=torch.float32),
        d**-0.5,
    )
