"""Which rows of a step's flattened batch run under which adapter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

BASE_ROW = 0
"""`LoraBatch.row_ids` of a base-model row (adapter ids start at 1, `LoraManager`)."""


@dataclass(frozen=True)
class LoraBatch:
    """The adapters of one step and the adapter of each of its rows.

    Attributes:
        lora_ids: the distinct adapters of the step, ascending; `LoraLinear` stacks exactly
            these (and caches the stack under this key), so a step pays for the adapters in
            it, not for every adapter loaded.
        row_ids: `[T]` int64 on the model's device: each row's adapter id, `BASE_ROW` for the
            base model's rows.
    """

    lora_ids: tuple[int, ...]
    row_ids: torch.Tensor

    @cached_property
    def rows_by_adapter(self) -> tuple[slice | torch.Tensor, ...]:
        """Each adapter's rows of the step, in `lora_ids` order: a range when they are
        consecutive (a slice), else `[n]` int64 indices on the model's device. Found once per
        step, when the batch-invariant path (`engine.lora.invariant`) first asks."""
        host = self.row_ids.cpu()
        device = self.row_ids.device
        return tuple(_rows_of(torch.nonzero(host == i).flatten(), device) for i in self.lora_ids)

    @classmethod
    def from_step(
        cls, lora_ids: Sequence[int | None], q_lens: Sequence[int], device: torch.device
    ) -> LoraBatch | None:
        """From each sequence's adapter (None: base) and its tokens in the step; None when no
        sequence has an adapter."""
        present = tuple(sorted({i for i in lora_ids if i is not None}))
        if not present:
            return None
        ids = torch.tensor([BASE_ROW if i is None else i for i in lora_ids], dtype=torch.int64)
        rows = torch.repeat_interleave(ids, torch.tensor(q_lens, dtype=torch.int64))
        return cls(present, rows.to(device))


def _rows_of(index: torch.Tensor, device: torch.device) -> slice | torch.Tensor:
    """Host row indices as a slice when consecutive, else as a tensor on `device`."""
    start, n = int(index[0]), len(index)
    if int(index[-1]) - start == n - 1:
        return slice(start, start + n)
    return index.to(device)
