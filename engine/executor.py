"""Where the forward pass runs: in this process (one rank) or on rank actors (tensor and
pipeline parallel).

Start-up is three steps so the KV cache can be sized from measured memory: load the weights,
`profile` a forward pass at the largest step, then `allocate_kv` the blocks the engine decided.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch

from engine.decode_graphs import DecodeGraphSpec
from engine.kv_budget import MemoryProfile
from engine.kv_cache import KVCacheSpec
from engine.kv_layout import AnyKVSpec, allocate_kv_caches
from engine.lora.adapter import LoraAdapter
from engine.lora.model import LoraModel
from engine.model_loader import weight_bytes
from engine.model_runner import ModelRunner
from engine.multimodal.encoder_cache import EncoderCache
from engine.parallel.sharding import LinearShard
from engine.parallel.stage_layers import StageLayers, stage_kv_caches
from engine.step_input import StepInput
from engine.step_result import StepResult
from npu_ops.platform import current_platform


class ExecutorDead(RuntimeError):
    """A rank of the executor is gone (its process or node died): no later step can run.

    Raised by `Executor.execute`; the engine stops serving on it (unlike a step that fails for
    its batch), so that the replica's health check fails and Ray Serve replaces the replica.
    """


class Executor(Protocol):
    """Runs steps on the model; the engine does not care how many ranks there are."""

    def profile(self, num_tokens: int) -> MemoryProfile:
        """Memory figures after a forward pass of `num_tokens` tokens (the tightest rank)."""

    def allocate_kv(self, num_blocks: int) -> None:
        """Allocate the KV cache; `execute` works only after this."""

    concurrent_capture: bool
    """Whether `capture` may run on another thread while steps execute (`engine.graph_capture`):
    True for one process; False for tensor-parallel ranks, whose collectives it would
    interleave."""

    def capture(self, size: int) -> None:
        """Compile the decode graph of `size` rows and put it in use (graph mode only; see
        `ModelRunner.capture`)."""

    def decode_graphs_in_use(self) -> frozenset[int]:
        """The decode graph sizes compiled so far (decode steps of other sizes run eager)."""

    def execute(self, step: StepInput) -> StepResult:
        """Run the step: its logits, and its hidden states if `step.return_hidden`.

        Raises:
            ExecutorDead: a rank is gone; every later step would fail too.
        """

    def lora_targets(self) -> dict[str, tuple[int, int]]:
        """Module name -> unsharded `(in_features, out_features)` an adapter may target (only
        with LoRA on)."""

    def add_lora(self, adapter: LoraAdapter) -> None:
        """Put an adapter on the model's layers (every rank's share of it)."""

    def remove_lora(self, lora_id: int) -> None:
        """Take an adapter off the model's layers."""

    def shutdown(self) -> None:
        """Release ranks and devices."""


class ModelShard:
    """One rank's model (or the whole model) plus, once allocated, its KV cache.

    Args:
        model: the loaded (possibly sharded) HF model, on `device`.
        spec: this rank's KV geometry.
        block_size: tokens per block.
        device: where the model lives.
        graphs: decode steps to run as captured graphs (`engine.decode_graphs`); None runs
            every step eager. With graphs the cache holds one block more than the engine's
            block manager: the padding block of padded decode steps.
        lora: wrap the model's linears for LoRA adapters (`engine.lora.model.LoraModel`).
        lora_shards: under tensor parallel, what this rank kept of each linear (adapters are
            sharded alike).
        stage: under pipeline parallel, the layers this shard holds
            (`engine.parallel.stage_layers`): its cache holds those layers only, and it runs
            steps through `engine.parallel.pipeline`. None: the whole model.
        encoder_cache: a multimodal model's encoder outputs kept across steps
            (`engine.multimodal.encoder_cache`); None: a text model, or none kept.
        lora_batch_invariant: compute each LoRA row on its own (`engine.lora.invariant`), the
            engine's `batch_invariant` setting.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        spec: AnyKVSpec,
        block_size: int,
        device: torch.device,
        graphs: DecodeGraphSpec | None = None,
        lora: bool = False,
        lora_shards: Mapping[str, LinearShard] | None = None,
        stage: StageLayers | None = None,
        encoder_cache: EncoderCache | None = None,
        lora_batch_invariant: bool = False,
    ) -> None:
        self.stage = stage
        self.encoder_cache = encoder_cache
        self.graphs = graphs
        self.model = model
        self.lora = LoraModel(model, device, lora_shards, lora_batch_invariant) if lora else None
        self.spec = spec
        self.block_size = block_size
        self.device = device
        self.runner: ModelRunner | None = None

    def profile(self, num_tokens: int) -> MemoryProfile:
        """Run one prefill of `num_tokens` tokens against a scratch cache and measure memory
        (a pipeline stage's layers only, on zero hidden states after the first stage)."""
        platform = current_platform()
        weights = weight_bytes(self.model)
        blocks = -(-num_tokens // self.block_size)
        scratch = self._caches(blocks)
        runner = ModelRunner(self.model, scratch, self.block_size, self.device)
        platform.reset_peak_memory()
        step = StepInput(
            [0] * num_tokens,
            [0],
            [num_tokens],
            [list(range(blocks))],
            [num_tokens - 1],
            [num_tokens],
            sliding_tables=(tuple(range(blocks)),) if self.spec.hybrid else (),
        )
        if self.stage is None:
            runner.execute(step)
        else:
            hidden = None
            if not self.stage.first:
                width = int(self.model.config.hidden_size)
                hidden = torch.zeros(num_tokens, width, dtype=self.model.dtype, device=self.device)
            runner.execute_stage(step, hidden, last=self.stage.last)
        platform.synchronize()
        peak = max(0, platform.peak_memory_allocated() - weights)
        del runner, scratch
        _, total = platform.memory_info(self.device.index or 0)
        return MemoryProfile(total=total, weights=weights, peak_activations=peak)

    def allocate_kv(self, num_blocks: int) -> None:
        """Allocate the KV cache and make the shard ready to execute."""
        pad_blocks = 0 if self.graphs is None else 1
        caches = self._caches(num_blocks + pad_blocks)
        self.runner = ModelRunner(
            self.model, caches, self.block_size, self.device, self.graphs, self.encoder_cache
        )

    def _caches(self, num_blocks: int) -> list[Any]:
        """Per-layer caches of `num_blocks` blocks: every layer's, or a pipeline stage's."""
        if self.stage is None:
            return allocate_kv_caches(self.spec, num_blocks, self.block_size, self.device)
        assert isinstance(self.spec, KVCacheSpec), "pipeline stages hold one KV kind"
        return stage_kv_caches(self.spec, self.stage, num_blocks, self.block_size, self.device)

    def capture(self, size: int) -> None:
        """See `ModelRunner.capture`."""
        assert self.runner is not None, "capture before allocate_kv"
        self.runner.capture(size)

    def decode_graphs_in_use(self) -> frozenset[int]:
        """See `Executor.decode_graphs_in_use`."""
        return frozenset() if self.runner is None else self.runner.graphs_in_use

    def execute(self, step: StepInput) -> StepResult:
        """See `Executor.execute`."""
        assert self.runner is not None, "execute before allocate_kv"
        if not step.return_hidden:
            return StepResult(self.runner.execute(step))
        return StepResult(*self.runner.execute_hidden(step))

    def lora_targets(self) -> dict[str, tuple[int, int]]:
        """See `engine.lora.manager.LoraExecutor`."""
        assert self.lora is not None, "LoRA is off for this model"
        return self.lora.targets()

    def add_lora(self, adapter: LoraAdapter) -> None:
        """See `engine.lora.manager.LoraExecutor`."""
        assert self.lora is not None, "LoRA is off for this model"
        self.lora.add(adapter)

    def remove_lora(self, lora_id: int) -> None:
        """See `engine.lora.manager.LoraExecutor`."""
        assert self.lora is not None, "LoRA is off for this model"
        self.lora.remove(lora_id)


class LocalExecutor(ModelShard):
    """The whole model in this process (tensor parallel size 1)."""

    concurrent_capture = True

    def shutdown(self) -> None:
        """Nothing to release."""
