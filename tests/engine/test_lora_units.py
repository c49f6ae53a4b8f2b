"""LoRA building blocks on their own: batch grouping, peft's pattern matching and scaling,
the host cache's LRU order and counters."""

from __future__ import annotations

import math

import pytest
import torch

from engine.lora.adapter import LoraAdapter, LoraRef
from engine.lora.adapter_config import AdapterConfig, pattern_key
from engine.lora.batch import LoraBatch, LoraGroup
from engine.lora.host_cache import LoraHostCache


def test_batch_groups_consecutive_rows_of_one_adapter() -> None:
    batch = LoraBatch.from_step([None, 3, 3, None, 5], [4, 1, 2, 1, 3])
    assert batch == LoraBatch((LoraGroup(3, 4, 7), LoraGroup(5, 8, 11)))
    assert LoraBatch.from_step([None, None], [2, 1]) is None


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
    from engine.lora.adapter import LoraWeights

    w = LoraWeights(torch.zeros(2, 3), torch.zeros(4, 2))
    assert LoraAdapter(LoraRef("a", "/a", 1), {"m": w}).nbytes() == (6 + 8) * 4
