"""One tensor-parallel rank: a Ray actor that holds a model shard and its KV cache."""

from __future__ import annotations

import logging
from datetime import timedelta

import torch
import torch.distributed as dist

from engine.executor import ModelShard
from engine.kv_budget import MemoryProfile
from engine.kv_cache import KVCacheSpec
from engine.model_loader import CheckpointRef, load_model
from engine.parallel.sharding import shard_model
from engine.step_input import StepInput
from npu_ops.platform import current_platform

logger = logging.getLogger(__name__)


class RankWorker:
    """Rank `rank` of `world`: joins the process group, loads and shards the model.

    Made a Ray actor with `ray.remote(RankWorker)` by the executor (decorating the class here
    would make Ray pickle its methods by value instead of by reference).

    Args:
        rank: this rank.
        world: tensor parallel size.
        init_method: `tcp://host:port` of the group's rendezvous.
        checkpoint: checkpoint path.
        spec: per-rank KV geometry.
        block_size: tokens per block.
        dtype: weights dtype.
        expert_parallel: split MoE experts across ranks instead of each expert's width.
        num_threads: CPU intra-op threads for this rank.
        enforce_eager: run the decoder op by op (False: graph mode).
    """

    def __init__(
        self,
        rank: int,
        world: int,
        init_method: str,
        checkpoint: str,
        spec: KVCacheSpec,
        block_size: int,
        dtype: torch.dtype,
        expert_parallel: bool,
        num_threads: int,
        enforce_eager: bool = True,
    ) -> None:
        platform = current_platform()
        torch.set_num_threads(num_threads)
        device = platform.device(0)  # Ray sets the visible-devices variable per actor
        dist.init_process_group(
            platform.dist_backend,
            init_method=init_method,
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=120),
        )
        ref = CheckpointRef.from_path(checkpoint)
        model = load_model(ref, dtype, device)
        shard_model(model, model.config, rank, world, expert_parallel)
        self.shard = ModelShard(model, spec, block_size, device, enforce_eager)
        self.rank = rank
        logger.info("rank %d/%d ready on %s (%s)", rank, world, device, platform.dist_backend)

    def profile(self, num_tokens: int) -> MemoryProfile:
        """See `ModelShard.profile`."""
        return self.shard.profile(num_tokens)

    def allocate_kv(self, num_blocks: int) -> None:
        """See `ModelShard.allocate_kv` (the same block count on every rank)."""
        self.shard.allocate_kv(num_blocks)

    def execute(self, step: StepInput) -> torch.Tensor | None:
        """Run the step on this shard; rank 0 returns the logits (on the CPU), others None."""
        logits = self.shard.execute(step)
        return logits.cpu() if self.rank == 0 else None

    def shutdown(self) -> None:
        """Leave the process group."""
        if dist.is_initialized():
            dist.destroy_process_group()
