"""`LoraLinear`: a base linear (plain, merged, int4, W8A8) plus the batched LoRA updates."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine.forward_context import current_forward_context
from engine.lora.adapter import LoraWeights
from engine.lora.batch import LoraBatch
from engine.lora.invariant import add_rows_update
from engine.parallel.layers import RowParallelLinear
from npu_ops.ops import active_ops
from npu_ops.ops.cpu_lora import KERNEL_DTYPES, runs_kernel


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
    """`base(x)` plus, for each row under an adapter, that adapter's update on every slice it
    targets: one op `grouped_lora` call per step, whatever the step's adapters and slices
    (S-LoRA, Sheng et al. 2023; Punica's SGMV, Chen et al. 2023).

    Per adapter the slices' weights are held as one `A` `[R_a, in]` (its slices' A stacked), one
    `B^T` `[R_a, out]` (each slice's B, transposed, in its own output columns, zero elsewhere;
    the scaling folded in) and each rank column's output span `[R_a, 2]`. A step stacks those
    of its adapters (`LoraBatch.lora_ids`) along the rank, cached until the step's adapters or
    the layer's weights change, so steady decode builds nothing (the cache is one more copy of
    those adapters' weights). On CPUs the weights stay in the model's dtype where the `cpu`
    kernel runs (`npu_ops.ops.cpu_lora`, which reads bfloat16 as float32), else in float32.

    Without a LoRA request in the step (`ForwardContext.lora` None) it is `base(x)` alone, so
    base-model steps, and graph-mode steps (which never carry LoRA rows), pay one attribute
    read per layer. Around a row-parallel base (tensor parallel), the update of this rank's
    input columns is added to the base's partial sum before its all-reduce, which then sums
    both.

    With `batch_invariant` a row's result must not depend on which rows and adapters share its
    step. The `cpu` kernel computes each row in an order fixed by its own adapter, so it serves
    both settings; elsewhere (the reference's two GEMMs, NPU) each adapter's rows are computed
    apart, by elementwise operations whose order does not depend on the step
    (`engine.lora.invariant`), slower than the GEMMs.

    Args:
        base: the layer wrapped, called as `base(x)`: `[..., in]` -> `[..., out]`.
        in_features: its input width.
        slices: its output columns per HF module, in order, covering `[0, out)`.
        batch_invariant: the engine's `batch_invariant` setting.
    """

    def __init__(
        self,
        base: nn.Module,
        in_features: int,
        slices: tuple[LoraSlice, ...],
        batch_invariant: bool = False,
    ) -> None:
        super().__init__()
        self.batch_invariant = batch_invariant
        self.base = base
        self.in_features = in_features
        self.out_features = sum(s.size for s in slices)
        self.slices = slices
        self.sizes = getattr(base, "sizes", None)  # MergedProjection's split, read by callers
        self._weights: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self._stack_key: tuple[int, ...] | None = None
        self._stack: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._ops = active_ops()
        self._kernel = self._ops.impl_name("grouped_lora") == "cpu"

    def set_adapter(self, lora_id: int, weights: tuple[LoraWeights | None, ...]) -> None:
        """Hold an adapter's weights per slice (None: the adapter does not target it)."""
        assert len(weights) == len(self.slices), "one entry per slice"
        self.remove_adapter(lora_id)
        parts = [(s, w) for s, w in zip(self.slices, weights, strict=True) if w is not None]
        if not parts:
            return
        a = torch.cat([w.a for _, w in parts])
        bt = a.new_zeros(a.shape[0], self.out_features)
        spans = torch.empty(a.shape[0], 2, dtype=torch.int64)
        col = 0
        for s, w in parts:
            rank = w.a.shape[0]
            bt[col : col + rank, s.start : s.start + s.size] = w.b.t()
            spans[col : col + rank] = torch.tensor([s.start, s.start + s.size])
            col += rank
        read_as_is = self._kernel and a.dtype in KERNEL_DTYPES
        if a.device.type == "cpu" and a.dtype in (torch.bfloat16, torch.float16) and not read_as_is:
            a, bt = a.float(), bt.float()  # small 16-bit GEMMs are 2-3x slower on CPUs
        self._weights[lora_id] = (a.contiguous(), bt.contiguous(), spans.to(a.device))

    def remove_adapter(self, lora_id: int) -> None:
        """Forget an adapter (no-op if not held)."""
        self._weights.pop(lora_id, None)
        self._stack_key = self._stack = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., in]` -> `[..., out]`."""
        ctx = current_forward_context()
        batch = None if ctx is None else ctx.lora
        if batch is None:
            return self.base(x)
        if isinstance(self.base, RowParallelLinear):
            return self.base.reduce(self._add_updates(self.base.partial(x), x, batch))
        return self._add_updates(self.base(x), x, batch)

    def _stacked(
        self, lora_ids: tuple[int, ...]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """`A` `[R, in]`, `B^T` `[R, out]`, each rank column's adapter id `[R]` and output span
        `[R, 2]` of the step's adapters that target this layer (None: none does)."""
        if lora_ids != self._stack_key:
            held = [(i, self._weights[i]) for i in lora_ids if i in self._weights]
            self._stack_key, self._stack = lora_ids, None
            if held:
                a = torch.cat([w[0] for _, w in held])
                bt = torch.cat([w[1] for _, w in held])
                cols = [torch.full((w[0].shape[0],), i, dtype=torch.int64) for i, w in held]
                spans = torch.cat([w[2] for _, w in held])
                self._stack = (a, bt, torch.cat(cols).to(a.device), spans)
        return self._stack

    def _add_updates(self, y: torch.Tensor, x: torch.Tensor, batch: LoraBatch) -> torch.Tensor:
        if self.batch_invariant and not self._kernel_runs(x, y):
            return self._add_updates_by_adapter(y, x, batch)
        stack = self._stacked(batch.lora_ids)
        if stack is None:
            return y
        a, bt, cols, spans = stack
        flat_x = x.reshape(-1, self.in_features)
        flat_y = y.reshape(-1, self.out_features)
        return self._ops.grouped_lora(flat_y, flat_x, a, bt, batch.row_ids, cols, spans).view(
            y.shape
        )

    def _kernel_runs(self, x: torch.Tensor, y: torch.Tensor) -> bool:
        """Whether op `grouped_lora` runs the (batch-invariant) CPU kernel on this step."""
        held = next(iter(self._weights.values()), None)
        return self._kernel and held is not None and runs_kernel(y.dtype, x.dtype, held[0].dtype)

    def _add_updates_by_adapter(
        self, y: torch.Tensor, x: torch.Tensor, batch: LoraBatch
    ) -> torch.Tensor:
        flat_x = x.reshape(-1, self.in_features)
        flat_y = y.reshape(-1, self.out_features)
        out = flat_y
        for lora_id, rows in zip(batch.lora_ids, batch.rows_by_adapter, strict=True):
            weights = self._weights.get(lora_id)
            if weights is None:
                continue
            if out is flat_y:
                out = flat_y.clone()
            a, bt, _ = weights
            add_rows_update(out, flat_y, flat_x, rows, a, bt.t())
        return out.view(y.shape)

    def extra_repr(self) -> str:
        return f"slices={[s.module.rpartition('.')[2] for s in self.slices]}"
