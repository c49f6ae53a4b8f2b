"""Which decoder layers a pipeline stage holds, and trimming a loaded model to them.

A stage keeps the weights of its consecutive decoder layers only; every other decoder layer
becomes a `PassThroughLayer`, so transformers' own decoder loop still runs unchanged on the
stage (vLLM's `PPMissingLayer`, `vllm/model_executor/models/utils.py`). The first stage keeps
the token embedding and receives token ids; later stages receive the previous stage's hidden
states as `inputs_embeds` (the decoders of the families the engine serves start their loop
from `inputs_embeds` unchanged). The last stage keeps the final norm and the output
projection; earlier stages hand on the raw hidden states (the residual stream: these
families' decoder layers add their residual inside the layer, so it is the one tensor).

The default split is even, with the remainder on the stages before the last, which also holds
the output projection (vLLM's `get_pp_indices`, `vllm/distributed/utils.py`);
`pipeline_layer_partition` overrides it (vLLM's `VLLM_PP_LAYER_PARTITION`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from engine.kv_cache import KVCacheSpec
from engine.kv_layout import allocate_kv_caches


def stage_layer_ranges(
    num_layers: int, stages: int, partition: list[int] | None = None
) -> list[range]:
    """Decoder layers of each pipeline stage, first stage first.

    Args:
        num_layers: the model's decoder layers (`num_hidden_layers`).
        stages: `pipeline_parallel_size`.
        partition: layers per stage (`pipeline_layer_partition`); None splits evenly.

    Raises:
        ValueError: fewer layers than stages, or a partition that does not sum to
            `num_layers` (the message names both).
    """
    if num_layers < stages:
        raise ValueError(
            f"pipeline_parallel_size={stages} needs at least one decoder layer per stage; the "
            f"model has {num_layers}"
        )
    if partition is None:
        counts = [num_layers // stages] * stages
        for i in range(num_layers % stages):  # the stages before the last, last-but-one first
            counts[-2 - i] += 1
    elif sum(partition) != num_layers:
        raise ValueError(
            f"pipeline_layer_partition {partition} sums to {sum(partition)}, but the model has "
            f"{num_layers} decoder layers"
        )
    else:
        counts = list(partition)
    bounds = [sum(counts[:i]) for i in range(stages + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(stages)]


@dataclass(frozen=True)
class StageLayers:
    """What one pipeline stage holds.

    Attributes:
        index: the stage, 0 first.
        stages: `pipeline_parallel_size`.
        layers: its decoder layers (global layer indices).
        num_layers: the whole model's decoder layers.
    """

    index: int
    stages: int
    layers: range
    num_layers: int

    @property
    def first(self) -> bool:
        """Embeds the tokens."""
        return self.index == 0

    @property
    def last(self) -> bool:
        """Norms, projects to logits and answers the step."""
        return self.index == self.stages - 1


class PassThroughLayer(nn.Module):
    """A module of another stage: returns its first input unchanged, holds no weights."""

    def forward(self, hidden_states: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        """`hidden_states` as given."""
        return hidden_states


def keep_stage_layers(model: PreTrainedModel, stage: StageLayers) -> None:
    """Trim a loaded HF causal LM to `stage`'s modules, in place (before sharding: the dropped
    layers' weights are freed and never sharded).

    Raises:
        ValueError: the model's decoder has no `layers` list of `stage.num_layers` layers.
    """
    decoder = model.get_decoder()
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) != stage.num_layers:
        raise ValueError(
            f"{type(model).__name__} has no decoder `layers` list of {stage.num_layers} layers: "
            "pipeline parallel cannot split it"
        )
    for i in range(stage.num_layers):
        if i not in stage.layers:
            layers[i] = PassThroughLayer()
    if not stage.first:
        decoder.embed_tokens = PassThroughLayer()
    if not stage.last:
        decoder.norm = nn.Identity()
        model.set_output_embeddings(PassThroughLayer())


def stage_kv_caches(
    spec: KVCacheSpec, stage: StageLayers, num_blocks: int, block_size: int, device: torch.device
) -> list[Any]:
    """Per-layer caches indexed by global layer index (the attention modules read
    `kv_caches[layer_idx]`): the stage's layers get `allocate_kv_caches` tensors of
    `num_blocks` blocks, the other layers empty placeholders that nothing reads.

    Args:
        spec: the whole model's KV geometry per tensor-parallel rank.
    """
    # a stage holds KV for its own layers only (`engine.kv_budget.pipeline_kv_blocks`)
    own = allocate_kv_caches(
        replace(spec, num_layers=len(stage.layers)), num_blocks, block_size, device
    )
    empty = torch.empty(0, device=device)
    caches: list[Any] = [(empty, empty)] * stage.num_layers
    caches[stage.layers.start : stage.layers.stop] = own
    return caches
