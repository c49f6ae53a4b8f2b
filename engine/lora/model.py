"""Wrap a loaded model's linears in `LoraLinear`, and put adapters on them.

Called once at load time, after tensor-parallel sharding, fused layers and quantisation (so it
wraps whatever the base layer has become: a merged q/k/v or gate/up GEMM, an int4 or W8A8
linear, a row-parallel shard), as vLLM's LoRA model manager replaces its base layers. Every
decoder linear is wrapped (a runtime-loaded adapter may target any of them); embeddings and the
LM head are not (adapters on them are refused).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch
from torch import nn

from engine.fused_layers import MergedProjection
from engine.lora.adapter import LoraAdapter, LoraWeights
from engine.lora.adapter_config import EMBEDDING_OR_HEAD
from engine.lora.layer import LoraLinear, LoraSlice
from engine.parallel.sharding import LinearShard

logger = logging.getLogger(__name__)


def _is_linear(module: nn.Module) -> bool:
    """nn.Linear and our replacements of it (`Int4WeightLinear`, `W8A8*Linear`)."""
    return (
        type(module).__name__.endswith("Linear")
        and isinstance(getattr(module, "in_features", None), int)
        and isinstance(getattr(module, "out_features", None), int)
    )


def _merged_slices(prefix: str, merged: MergedProjection) -> tuple[int, tuple[LoraSlice, ...]]:
    inner = merged.merged if merged.merged is not None else merged.parts[0]
    in_features = int(inner.in_features)
    names = merged.names
    if len(names) == len(merged.sizes):
        slices, start = [], 0
        for name, size in zip(names, merged.sizes, strict=True):
            slices.append(LoraSlice(f"{prefix}{name}", start, size))
            start += size
        return in_features, tuple(slices)
    assert len(names) == 1, f"{prefix}: {names} do not match sizes {merged.sizes}"
    return in_features, (LoraSlice(f"{prefix}{names[0]}", 0, sum(merged.sizes)),)


class LoraModel:
    """The model's `LoraLinear`s, by the HF module names adapters use.

    Args:
        model: the loaded model (wrapped in place).
        device: where adapter weights are put when added.
        shards: under tensor parallel, what this rank kept of each sharded linear
            (`engine.parallel.sharding.shard_model`'s plan); adapters are sliced the same way.
        batch_invariant: compute each LoRA row on its own (`engine.lora.invariant`), the
            engine's `batch_invariant` setting.
    """

    def __init__(
        self,
        model: nn.Module,
        device: torch.device,
        shards: Mapping[str, LinearShard] | None = None,
        batch_invariant: bool = False,
    ) -> None:
        self.device = device
        self.shards = dict(shards or {})
        self._layers: dict[str, tuple[LoraLinear, int]] = {}
        head = model.get_output_embeddings()
        wrapped: list[str] = []
        for name, module in list(model.named_modules()):
            parent_name, _, child = name.rpartition(".")
            prefix = f"{parent_name}." if parent_name else ""
            inside = any(name.startswith(f"{w}.") for w in wrapped)
            if inside or module is head or child in EMBEDDING_OR_HEAD or ".lm_head" in f".{name}":
                continue
            if isinstance(module, MergedProjection):
                in_features, slices = _merged_slices(prefix, module)
            elif _is_linear(module):
                in_features = int(module.in_features)
                slices = (LoraSlice(name, 0, int(module.out_features)),)
            else:
                continue
            layer = LoraLinear(module, in_features, slices, batch_invariant)
            wrapped.append(name)
            setattr(model.get_submodule(parent_name), child, layer)
            for i, s in enumerate(slices):
                self._layers[s.module] = (layer, i)
        logger.info("LoRA: %d linear modules may be targeted", len(self._layers))

    def targets(self) -> dict[str, tuple[int, int]]:
        """Module name -> `(in_features, out_features)` of every linear an adapter may target,
        unsharded (an adapter is checked against the whole model)."""
        shapes = {}
        for name, (layer, i) in self._layers.items():
            shard = self.shards.get(name)
            full = (layer.in_features, layer.slices[i].size)
            shapes[name] = full if shard is None else (shard.in_features, shard.out_features)
        return shapes

    def add(self, adapter: LoraAdapter) -> None:
        """Put an adapter (already checked against `targets`) on its layers, on the device."""
        per_layer: dict[int, tuple[LoraLinear, list[LoraWeights | None]]] = {}
        for module, w in adapter.weights.items():
            layer, i = self._layers[module]
            entry = per_layer.setdefault(id(layer), (layer, [None] * len(layer.slices)))
            a, b = w.a, w.b
            shard = self.shards.get(module)
            if shard is not None and shard.rows is not None:  # column parallel: B's rows
                b = b[shard.rows]
            if shard is not None and shard.cols is not None:  # row parallel: A's columns
                a = a[:, shard.cols]
            entry[1][i] = LoraWeights(
                a.contiguous().to(self.device), b.contiguous().to(self.device)
            )
        for layer, weights in per_layer.values():
            layer.set_adapter(adapter.ref.lora_id, tuple(weights))

    def remove(self, lora_id: int) -> None:
        """Take an adapter off every layer."""
        for layer, _ in self._layers.values():
            layer.remove_adapter(lora_id)
