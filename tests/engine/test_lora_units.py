"""LoRA building blocks on their own: the batch's row ids, the stacked update against each
adapter's own per slice, peft's pattern matching and scaling, the host cache's LRU order and
counters."""

from __future__ import annotations

import math
from typing import cast

import pytest
import torch

from engine.attention_metadata import AttentionMetadata
from engine.forward_context import ForwardContext, forward_context
from engine.lora.adapter import LoraAdapter, LoraRef, LoraWeights
from engine.lora.adapter_config import AdapterConfig, pattern_key
from engine.lora.batch import LoraBatch
from engine.lora.host_cache import LoraHostCache
from engine.lora.layer import LoraLinear, LoraSlice


def test_batch_marks_each_rows_adapter() -> None:
    batch = LoraBatch.from_step([None, 5, 3, None, 5], [4, 1, 2, 1, 3], torch.device("cpu"))
    assert batch is not None and batch.lora_ids == (3, 5)
    assert batch.row_ids.tolist() == [0, 0, 0, 0, 5, 3, 3, 0, 5, 5, 5]
    assert LoraBatch.from_step([None, None], [2, 1], torch.device("cpu")) is None


def test_stacked_updates_equal_each_adapters_own_per_slice() -> None:
    # a merged projection of three slices; adapter 1 (rank 2) targets slices 0 and 2, adapter 2
    # (rank 4) slice 1 only, adapter 3 (rank 3) every slice but has no row in the step
    g = torch.Generator().manual_seed(0)
    slices = (LoraSlice("q", 0, 5), LoraSlice("k", 5, 3), LoraSlice("v", 8, 4))
    base = torch.nn.Linear(6, 12, bias=False, dtype=torch.float64)
    layer = LoraLinear(base, 6, slices)

    def w(rank: int, out: int) -> LoraWeights:
        a = torch.randn(rank, 6, generator=g, dtype=torch.float64)
        return LoraWeights(a, torch.randn(out, rank, generator=g, dtype=torch.float64))

    weights = {
        1: (w(2, 5), None, w(2, 4)),
        2: (None, w(4, 3), None),
        3: (w(3, 5), w(3, 3), w(3, 4)),
    }
    for lora_id, per_slice in weights.items():
        layer.set_adapter(lora_id, per_slice)
    x = torch.randn(2, 4, 6, generator=g, dtype=torch.float64)
    batch = LoraBatch.from_step([2, None, 1, 2], [2, 3, 2, 1], torch.device("cpu"))
    assert batch is not None
    want = base(x).reshape(-1, 12)
    for row, lora_id in enumerate(batch.row_ids.tolist()):
        for s, sw in zip(slices, weights.get(lora_id, (None,) * 3), strict=True):
            if sw is not None:
                want[row, s.start : s.start + s.size] += sw.b @ (sw.a @ x.reshape(-1, 6)[row])
    meta = cast(AttentionMetadata, None)
    ctx = ForwardContext(meta, torch.empty(0), torch.empty(0), lora=batch)
    with torch.no_grad(), forward_context(ctx):
        got = layer(x)
        a, bt, cols, spans = layer._stacked(batch.lora_ids)  # adapter 3 held, not stacked
    torch.testing.assert_close(got, want.reshape(2, 4, 12))
    assert (a.shape, bt.shape, cols.tolist()) == ((4 + 4, 6), (8, 12), [1] * 4 + [2] * 4)
    assert spans.tolist() == [[0, 5]] * 2 + [[8, 12]] * 2 + [[5, 8]] * 4


def test_patterns_and_scaling_follow_peft() -> None:
    # peft's get_pattern_key: the key matches the whole name or a dotted suffix of it
    assert pattern_key({"q_proj": 4}, "model.layers.0.self_attn.q_proj") == "q_proj"
    assert pattern_key({"proj": 4}, "model.layers.0.self_attn.q_proj") is None
    assert pattern_key({r"layers\.1\.mlp\.up_proj": 4}, "model.layers.1.mlp.up_proj") is not None
    config = AdapterConfig(8, 16.0, False, {"v_proj": 4}, {"v_proj": 2.0})
    assert config.scaling("a.q_proj") == 16 / 8  # Hu et al. 2021: alpha / r
    assert config.scaling("a.v_proj") == 2.0 / 4
    rs = AdapterConfig(16, 8.0, True, {}, {})
    assert rs.scaling("a.q_proj") == 8 / math.sqrt(16)  # Kalajdzievski 2023: alpha / sqrt(r)


def test_host_cache_is_lru_and_counts_loads_and_evictions() -> None:
    evicted: list[int] = []
    refs = {i: LoraRef(f"n{i}", f"/p{i}", i) for i in range(1, 4)}
    cache = LoraHostCache(2, lambda ref: LoraAdapter(ref, {}), evicted.append)
    for i in (1, 2, 1, 3):  # 3 evicts 2, the least recently used
        cache.get(refs[i])
    assert (cache.loads, cache.evictions, cache.resident(), evicted) == (3, 1, [1, 3], [2])
    cache.get(refs[2], pinned=frozenset({1, 2}))  # 1 is pinned: 3 goes
    assert cache.resident() == [1, 2] and evicted == [2, 3]
    cache.evict(1)  # an unload: not counted as an eviction
    assert (cache.loads, cache.evictions, cache.resident()) == (4, 2, [2])


def test_host_cache_keeps_what_it_has_when_a_read_fails() -> None:
    def read(ref: LoraRef) -> LoraAdapter:
        if ref.lora_id == 9:
            raise ValueError("bad adapter")
        return LoraAdapter(ref, {})

    cache = LoraHostCache(1, read, lambda _: None)
    cache.get(LoraRef("a", "/a", 1))
    with pytest.raises(ValueError, match="bad adapter"):
        cache.get(LoraRef("b", "/b", 9))
    assert cache.resident() == [1] and cache.loads == 1


def test_adapter_bytes() -> None:
    w = LoraWeights(torch.zeros(2, 3), torch.zeros(4, 2))
    assert LoraAdapter(LoraRef("a", "/a", 1), {"m": w}).nbytes() == (6 + 8) * 4
