"""`LoraLinear`: a base linear (plain, merged, int4, W8A8) plus the batched LoRA updates."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine.forward_context import current_forward_context
from engine.lora.adapter import LoraWeights
from engine.lora.batch import LoraBatch
from engine.parallel.layers import RowParallelLinear
from npu_ops.ops import active_ops


@dataclass(frozen=True)
class LoraSlice:
    """Output columns of a wrapped layer that one base-model module produces.

    A merged projection (`engine.fused_layers.MergedProjection`: q/k/v, gate/up) is several HF
    modules in one GEMM; each has its own adapter weights, applied to its own columns.

    Attributes:
        module: the HF module name, e.g. `model.layers.0.self_attn.k_proj`.
        start: first output column.
        size: output columns.
    """

    module: str
    start: int
    size: int


class LoraLinear(nn.Module):
    """`base(x)` plus, for the rows of each adapter in the step, that adapter's update on each
    slice it targets, through op `grouped_lora`.

    Without a LoRA request in the step (`ForwardContext.lora` None) it is `base(x)` alone, so
    base-model steps, and graph-mode steps (which never carry LoRA rows), pay one attribute
    read per layer. Around a row-parallel base (tensor parallel), the update of this rank's
    input columns is added to the base's partial sum before its all-reduce, which then sums
    both.

    Args:
        base: the layer wrapped, called as `base(x)`: `[..., in]` -> `[..., out]`.
        in_features: its input width.
        slices: its output columns per HF module, in order, covering `[0, out)`.
    """

    def __init__(self, base: nn.Module, in_features: int, slices: tuple[LoraSlice, ...]) -> None:
        super().__init__()
        self.base = base
        self.in_features = in_features
        self.out_features = sum(s.size for s in slices)
        self.slices = slices
        self.sizes = getattr(base, "sizes", None)  # MergedProjection's split, read by callers
        self._weights: dict[int, tuple[LoraWeights | None, ...]] = {}
        self._ops = active_ops()

    def set_adapter(self, lora_id: int, weights: tuple[LoraWeights | None, ...]) -> None:
        """Hold an adapter's weights per slice (None: the adapter does not target it)."""
        assert len(weights) == len(self.slices), "one entry per slice"
        self._weights[lora_id] = weights

    def remove_adapter(self, lora_id: int) -> None:
        """Forget an adapter (no-op if not held)."""
        self._weights.pop(lora_id, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., in]` -> `[..., out]`."""
        ctx = current_forward_context()
        batch = None if ctx is None else ctx.lora
        if batch is None:
            return self.base(x)
        if isinstance(self.base, RowParallelLinear):
            return self.base.reduce(self._add_updates(self.base.partial(x), x, batch))
        return self._add_updates(self.base(x), x, batch)

    def _add_updates(self, y: torch.Tensor, x: torch.Tensor, batch: LoraBatch) -> torch.Tensor:
        flat_x = x.reshape(-1, self.in_features)
        flat_y = y.reshape(-1, self.out_features)
        for i, part in enumerate(self.slices):
            a, b, starts, stops = [], [], [], []
            for group in batch.groups:
                held = self._weights.get(group.lora_id)
                w = None if held is None else held[i]
                if w is not None:
                    a.append(w.a)
                    b.append(w.b)
                    starts.append(group.start)
                    stops.append(group.stop)
            if not a:
                continue
            if len(self.slices) == 1:
                flat_y = self._ops.grouped_lora(flat_y, flat_x, a, b, starts, stops)
            else:
                cols = slice(part.start, part.start + part.size)
                updated = self._ops.grouped_lora(flat_y[:, cols], flat_x, a, b, starts, stops)
                flat_y[:, cols] = updated
        return flat_y.view(y.shape)

    def extra_repr(self) -> str:
        return f"slices={[s.module.rpartition('.')[2] for s in self.slices]}"
