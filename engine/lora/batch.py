"""Which rows of a step's flattened batch run under which adapter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LoraGroup:
    """Consecutive rows of the flattened batch under one adapter.

    Attributes:
        lora_id: the adapter (`LoraRef.lora_id`).
        start: first row.
        stop: one past the last row.
    """

    lora_id: int
    start: int
    stop: int


@dataclass(frozen=True)
class LoraBatch:
    """The adapter groups of one step; rows in no group run on the base model alone.

    The engine orders a step's sequences by adapter, so each adapter present is one group and a
    step pays for the adapters in it, not for every adapter loaded.
    """

    groups: tuple[LoraGroup, ...]

    @classmethod
    def from_step(cls, lora_ids: Sequence[int | None], q_lens: Sequence[int]) -> LoraBatch | None:
        """Groups from each sequence's adapter (None: base) and its tokens in the step; None
        when no sequence has an adapter."""
        groups: list[LoraGroup] = []
        row = 0
        for lora_id, n in zip(lora_ids, q_lens, strict=True):
            if lora_id is not None:
                if groups and groups[-1].lora_id == lora_id and groups[-1].stop == row:
                    groups[-1] = LoraGroup(lora_id, groups[-1].start, row + n)
                else:
                    groups.append(LoraGroup(lora_id, row, row + n))
            row += n
        return cls(tuple(groups)) if groups else None
