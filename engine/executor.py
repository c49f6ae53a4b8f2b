"""Where the forward pass runs: in this process (one rank) or on tensor-parallel rank actors."""

from __future__ import annotations

from typing import Protocol

import torch

from engine.kv_cache import KVCacheSpec, allocate_kv_caches
from engine.model_loader import CheckpointRef, load_model
from engine.model_runner import ModelRunner
from engine.step_input import StepInput


class Executor(Protocol):
    """Runs steps on the model; the engine does not care how many ranks there are."""

    def execute(self, step: StepInput) -> torch.Tensor:
        """Logits `[len(step.rows), vocab_size]` float32 for the step."""

    def shutdown(self) -> None:
        """Release ranks and devices."""


class LocalExecutor:
    """The whole model in this process (tensor parallel size 1).

    Args:
        ref: the checkpoint.
        spec: KV geometry.
        num_blocks: KV blocks to allocate.
        block_size: tokens per block.
        dtype: weights and activations dtype.
        device: where to run.
    """

    def __init__(
        self,
        ref: CheckpointRef,
        spec: KVCacheSpec,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        model = load_model(ref, dtype, device)
        caches = allocate_kv_caches(spec, num_blocks, block_size, device)
        self.runner = ModelRunner(model, caches, block_size, device)

    def execute(self, step: StepInput) -> torch.Tensor:
        """See `Executor.execute`."""
        return self.runner.execute(step)

    def shutdown(self) -> None:
        """Nothing to release."""
