"""KV budget derivation: CPU byte budget, NPU/CUDA profile formula, and start-up errors."""

from __future__ import annotations

import pytest
import torch

from configs.engine_config import EngineConfig
from engine.kv_budget import MemoryProfile, num_kv_blocks
from engine.kv_cache import KVCacheSpec

GiB = 1 << 30
# SmolLM2-135M: 30 layers, 3 KV heads, head dim 64
SPEC = KVCacheSpec(30, 3, 64, 64, torch.float32)


def test_bytes_per_block_formula() -> None:
    # layers x kv_heads x (k + v head dims) x block_size x dtype bytes
    assert SPEC.bytes_per_block(16) == 30 * 3 * (64 + 64) * 16 * 4 == 737280


def test_cpu_budget_gives_blocks_and_logs_derivation(caplog) -> None:
    caplog.set_level("INFO")
    assert num_kv_blocks(EngineConfig(kv_cache_memory_bytes=512 << 20), SPEC, 8192, None) == 728
    assert "kv_cache_memory_bytes" in caplog.text and "728 blocks" in caplog.text


def test_accelerator_budget_follows_vllm_formula() -> None:
    profile = MemoryProfile(total=64 * GiB, weights=15 * GiB, peak_activations=2 * GiB)
    cfg = EngineConfig(gpu_memory_utilization=0.9, block_size=128)
    kv_bytes = int(64 * GiB * 0.9) - 17 * GiB
    assert num_kv_blocks(cfg, SPEC, 32768, profile) == kv_bytes // SPEC.bytes_per_block(128)


def test_hand_set_blocks_win() -> None:
    assert num_kv_blocks(EngineConfig(num_kv_blocks=1000), SPEC, 8192, None) == 1000


@pytest.mark.parametrize(
    ("cfg", "profile", "message"),
    [
        (EngineConfig(kv_cache_memory_bytes=1 << 20), None, "fewer than one sequence"),
        (
            EngineConfig(gpu_memory_utilization=0.3),
            MemoryProfile(64 * GiB, 20 * GiB, 1 * GiB),
            "no memory left for the KV cache",
        ),
    ],
    ids=["tiny-cpu-budget", "weights-exceed-utilisation"],
)
def test_too_small_budget_is_a_clear_start_up_error(cfg, profile, message) -> None:
    with pytest.raises(ValueError, match=message):
        num_kv_blocks(cfg, SPEC, 8192, profile)


def test_engine_refuses_to_start_with_a_tiny_budget(smollm2_path: str) -> None:
    from engine.llm_engine import LLMEngine

    with pytest.raises(ValueError, match="kv_cache_memory_bytes.*fewer than one sequence"):
        LLMEngine(smollm2_path, EngineConfig(kv_cache_memory_bytes=1 << 20, max_model_len=2048))
