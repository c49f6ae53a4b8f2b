"""What the layers of one forward pass may read about the step: published by the model runner.

transformers calls our attention function and our linears with tensors only, so the per-step
facts they need travel in a thread-local `ForwardContext` (vLLM's "forward context"):
- `attention`: the paged-attention metadata (block tables, slots, masks).
- `lora`: which rows run under which LoRA adapter (`engine.lora`).
- `hybrid`: DeepSeek-V4's step indices into its hybrid cache (`engine.deepseek_v4`).
- `prompt_rows` / `generated_rows`: which tokens of the flattened batch are prompt tokens and
  which were generated. A token's layer inputs are computed by the same kernels whatever batch
  it shares (an int4 layer sends generated tokens through the int4 GEMV and prompt tokens
  through the dense GEMM), so a request's output does not depend on its neighbours, on prefix
  cache hits or on where prefill was chunked.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from engine.attention_metadata import AttentionMetadata
    from engine.deepseek_v4.step_indices import HybridStep
    from engine.lora.batch import LoraBatch


@dataclass(frozen=True)
class ForwardContext:
    """Per-step inputs that the model's layers read.

    Attributes:
        attention: see `engine.attention_metadata.AttentionMetadata`.
        prompt_rows: `[P]` int64, positions in the flattened batch of prompt tokens.
        generated_rows: `[G]` int64, positions of generated tokens (`P + G = T`).
        lora: the step's rows per LoRA adapter (`engine.lora.layer.LoraLinear` reads it); None
            when every row runs on the base model (always so in graph steps).
        hybrid: the step's positions and both block tables of a hybrid KV cache
            (`engine.deepseek_v4.step_indices`); None for other models.
    """

    attention: AttentionMetadata
    prompt_rows: torch.Tensor
    generated_rows: torch.Tensor
    lora: LoraBatch | None = None
    hybrid: HybridStep | None = None


_local = threading.local()


class forward_context:  # noqa: N801 - used as a context manager, like torch.no_grad
    """Publish `ctx` to the layers for the duration of one forward pass."""

    def __init__(self, ctx: ForwardContext) -> None:
        self.ctx = ctx

    def __enter__(self) -> ForwardContext:
        _local.ctx = self.ctx
        return self.ctx

    def __exit__(self, *exc: object) -> None:
        _local.ctx = None


def current_forward_context() -> ForwardContext | None:
    """The context of the forward pass running on this thread, if any."""
    return getattr(_local, "ctx", None)
