"""How many KV blocks a replica gets, and the start-up log line that says why.

* Hand-set: `num_kv_blocks`.
* CPU: every replica and Ray share host memory, so the budget is explicit:
  `kv_cache_memory_bytes`.
* NPU / CUDA, as vLLM derives it (`gpu_worker.determine_available_memory`):
  `kv_bytes = total_device_bytes * gpu_memory_utilization - weights - peak_activations`, where
  the peak is measured by a profiling forward pass of `max_num_batched_tokens` tokens.

`num_blocks = kv_bytes // bytes_per_block` (see `engine.kv_cache`; DeepSeek MLA is sized by its
latent, `kv_lora_rank + qk_rope_head_dim` per token and layer, the same on every rank; an 8-bit
cache, `engine.kv_cache_dtype`, by its codes and per-token-per-head scales), where a
speculative drafting model's bytes per block count too. `kv_budget` computes it; the engine's
start-up logs and checks it (`num_kv_blocks`); `ascend-router plan` calls `kv_budget` with the
planned device figures (`operate.planning.memory_plan`), so both give the same block count.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from configs.engine_config import EngineConfig
from engine.kv_cache import KVCacheSpec
from engine.kv_layout import AnyKVSpec

logger = logging.getLogger(__name__)

GiB = float(1 << 30)


@dataclass(frozen=True)
class MemoryProfile:
    """Device memory figures of one rank, in bytes.

    Attributes:
        total: device memory.
        weights: bytes held by the model's parameters.
        peak_activations: peak bytes allocated during the profiling forward pass, beyond the
            weights.
    """

    total: int
    weights: int
    peak_activations: int


@dataclass(frozen=True)
class KVBudget:
    """How many KV blocks fit on one rank, and from what (`kv_budget`).

    Attributes:
        blocks: KV blocks of `block_size` tokens.
        kv_bytes: bytes for the blocks, after a hybrid cache's sliding-window pool; negative
            when the weights and activations already exceed the allowed device memory.
        bytes_per_block: bytes of one block, the drafting model's share included.
        sliding_pool_bytes: a hybrid cache's sliding-window pool (0 for other caches), taken
            off the budget first.
        source: where the budget came from, in words (the start-up log's).
    """

    blocks: int
    kv_bytes: int
    bytes_per_block: int
    sliding_pool_bytes: int
    source: str


def kv_budget(
    config: EngineConfig,
    spec: AnyKVSpec,
    profile: MemoryProfile | None,
    draft: AnyKVSpec | None = None,
) -> KVBudget:
    """The KV budget of one rank (the module docstring's formulas), neither logged nor checked:
    the engine's start-up (`num_kv_blocks`) and `ascend-router plan` both size the cache here.

    Args:
        config: engine settings.
        spec: per-rank KV geometry (`engine.kv_layout.kv_spec`).
        profile: device memory figures on NPU/CUDA (measured at start-up, planned by
            `operate.planning`); None on CPU.
        draft: the KV geometry of a speculative drafting model
            (`engine.spec_decode.draft_kv.draft_kv_spec`), which holds as many blocks as the
            target: its bytes per block count too.
    """
    per_block = spec.bytes_per_block(config.block_size)
    if draft is not None:
        per_block += draft.bytes_per_block(config.block_size)
    # a hybrid cache's sliding-window pool is a fixed allotment, taken off the budget first
    sliding = spec.sliding_pool_bytes(config.block_size)
    if config.num_kv_blocks is not None:
        blocks = config.num_kv_blocks
        return KVBudget(blocks, blocks * per_block, per_block, sliding, "num_kv_blocks (hand-set)")
    if profile is None:
        kv_bytes = config.kv_cache_memory_bytes - sliding
        source = f"kv_cache_memory_bytes={config.kv_cache_memory_bytes / GiB:.3f} GiB (CPU)"
    else:
        allowed = int(profile.total * config.gpu_memory_utilization)
        kv_bytes = allowed - profile.weights - profile.peak_activations - sliding
        source = (
            f"device {profile.total / GiB:.2f} GiB x gpu_memory_utilization="
            f"{config.gpu_memory_utilization} - weights {profile.weights / GiB:.2f} GiB - peak "
            f"activations {profile.peak_activations / GiB:.2f} GiB = {kv_bytes / GiB:.2f} GiB"
        )
    return KVBudget(max(0, kv_bytes) // per_block, kv_bytes, per_block, sliding, source)


def num_kv_blocks(
    config: EngineConfig,
    spec: AnyKVSpec,
    max_model_len: int,
    profile: MemoryProfile | None,
    draft: AnyKVSpec | None = None,
) -> int:
    """Blocks for this replica's KV cache (per rank), logged with the derivation (`kv_budget`).

    Args:
        config: engine settings.
        spec: per-rank KV geometry.
        max_model_len: context length in tokens.
        profile: the measured profile on NPU/CUDA; None on CPU.
        draft: the KV geometry of a speculative drafting model (`engine.spec_decode.build`),
            which holds as many blocks as the target: its bytes per block count too.

    Raises:
        ValueError: the budget cannot hold one sequence of `max_model_len` tokens, or the
            weights and activations already exceed the allowed device memory (the message
            gives the figures and which setting to change).
    """
    budget = kv_budget(config, spec, profile, draft)
    source, per_block, sliding = budget.source, budget.bytes_per_block, budget.sliding_pool_bytes
    if profile is not None and config.num_kv_blocks is None and budget.kv_bytes <= 0:
        raise ValueError(
            f"no memory left for the KV cache: {source}; raise gpu_memory_utilization, "
            "lower max_num_batched_tokens, or use more tensor-parallel ranks"
        )
    if sliding:
        source += f"; sliding-window pool {sliding / GiB:.3f} GiB"
    blocks = budget.blocks
    tokens = blocks * config.block_size
    logger.info(
        "KV cache: %s; %g bytes/token (%s), %d bytes/block (block_size=%d) -> %d blocks = %d "
        "tokens = %.2f sequences at max_model_len=%d",
        source,
        per_block / config.block_size,
        spec.describe() + ("" if draft is None else f"; drafting model {draft.describe()}"),
        per_block,
        config.block_size,
        blocks,
        tokens,
        tokens / max_model_len,
        max_model_len,
    )
    if tokens < max_model_len:
        raise ValueError(
            f"KV cache holds {tokens} tokens ({blocks} blocks of {config.block_size}; {source}), "
            f"fewer than one sequence of max_model_len={max_model_len}: give it at least "
            f"{max_model_len * per_block // config.block_size + sliding} bytes or lower "
            "max_model_len"
        )
    return int(blocks)


def pipeline_kv_blocks(
    config: EngineConfig,
    spec: KVCacheSpec,
    stage_layers: list[int],
    max_model_len: int,
    profiles: list[MemoryProfile | None],
) -> int:
    """Blocks per rank under pipeline parallel: each stage holds KV for its own layers only, so
    its bytes per block are `spec`'s times its share of the layers; every stage holds the
    engine's blocks, so the stage that fits the fewest decides (`num_kv_blocks` per stage,
    each logged).

    Args:
        config: engine settings.
        spec: the whole model's KV geometry per tensor-parallel rank.
        stage_layers: decoder layers per stage (`engine.parallel.stage_layers`).
        max_model_len: context length in tokens.
        profiles: per stage, its tightest rank's measured profile on NPU/CUDA; None on CPU.

    Raises:
        ValueError: see `num_kv_blocks`, for any stage.
    """
    return min(
        num_kv_blocks(config, replace(spec, num_layers=layers), max_model_len, profile)
        for layers, profile in zip(stage_layers, profiles, strict=True)
    )
