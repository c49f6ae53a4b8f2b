"""Where each token of a step reads and writes DeepSeek-V4's hybrid cache, as index tensors.

The model runner publishes one `HybridStep` per step (`engine.forward_context`); the attention
layers derive from it, once per step and shared by every layer, the cache slots they need:
- the sliding slot of each new token (its K=V and compressor state are written there);
- each query's raw window: the slots of positions `p - sliding_window + 1 .. p`;
- per compress ratio `r`: the tokens that close a window (`(p + 1) % r == 0`), the slots of that
  window's tokens (from `p + 1 - 2r` where windows overlap, else `p + 1 - r`), the slot its entry
  goes to, and each query's visible entries `j < (p + 1) // r` (an entry is visible once its
  window's last token is at or before the query: the report's causality rule, transformers'
  `causal_threshold`).

Slots: a per-token kind's token `p` of sequence `s` is at `sliding_table[s][p // B] * B + p % B`;
entry `j` of ratio `r` at `block_table[s][j * r // B] * (B // r) + j % (B // r)` (`B` =
block size). `-1` marks a position before the sequence, or padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class RatioIndices:
    """One compress ratio's indices for a step.

    Attributes:
        window_slots: `[E, R]` sliding slots of the tokens of each window closed this step.
        entry_slots: `[E]` where each closed window's entry is written.
        entry_positions: `[E]` the position of each entry (its window's first token, where the
            RoPE of the entry is taken).
        visible: `[T, N]` each query's visible entries' slots, oldest first, `-1` padded.
    """

    window_slots: torch.Tensor
    entry_slots: torch.Tensor
    entry_positions: torch.Tensor
    visible: torch.Tensor


@dataclass(frozen=True)
class HybridStep:
    """The step's tokens and tables.

    Attributes:
        positions: `[T]` int64, each token's position in its sequence.
        token_seq: `[T]` int64, each token's sequence (row of the tables).
        full_tables: `[S, Bf]` int64 full-group block tables, padded with 0.
        sliding_tables: `[S, Bs]` int64 sliding-group block tables, `-1` for released and
            padding blocks.
        block_size: tokens per block.
    """

    positions: torch.Tensor
    token_seq: torch.Tensor
    full_tables: torch.Tensor
    sliding_tables: torch.Tensor
    block_size: int
    _memo: dict[tuple[str, int], object] = field(default_factory=dict, compare=False)

    @classmethod
    def build(
        cls,
        positions: torch.Tensor,
        token_seq: torch.Tensor,
        full_tables: list[list[int]],
        sliding_tables: tuple[tuple[int, ...], ...],
        block_size: int,
        device: torch.device,
    ) -> HybridStep:
        """From the step's per-sequence tables (`engine.step_input.StepInput`)."""
        width = max(len(t) for t in sliding_tables)
        sliding = [list(t) + [-1] * (width - len(t)) for t in sliding_tables]
        width = max(len(t) for t in full_tables)
        full = [t + [0] * (width - len(t)) for t in full_tables]
        return cls(
            positions.to(device),
            token_seq.to(device),
            torch.tensor(full, dtype=torch.long, device=device),
            torch.tensor(sliding, dtype=torch.long, device=device),
            block_size,
        )

    def sliding_slots(self, seq: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Sliding slots of positions `pos` of sequences `seq` (same shape), `-1` where
        `pos < 0` or the block is released."""
        bs = self.block_size
        blocks = (pos.clamp(min=0) // bs).clamp(max=self.sliding_tables.shape[1] - 1)
        block = self.sliding_tables[seq, blocks]
        slots = block * bs + pos.clamp(min=0) % bs
        return slots.masked_fill((pos < 0) | (block < 0), -1)

    def write_slots(self) -> torch.Tensor:
        """`[T]` the sliding slot of every token of the step."""
        memo = self._memo.get(("write", 0))
        if memo is None:
            memo = self.sliding_slots(self.token_seq, self.positions)
            self._memo[("write", 0)] = memo
        return memo  # type: ignore[return-value]

    def window(self, sliding_window: int) -> torch.Tensor:
        """`[T, sliding_window]` each query's raw-window slots, oldest first."""
        memo = self._memo.get(("window", sliding_window))
        if memo is None:
            back = torch.arange(sliding_window - 1, -1, -1, device=self.positions.device)
            pos = self.positions[:, None] - back[None, :]
            memo = self.sliding_slots(self.token_seq[:, None].expand_as(pos), pos)
            self._memo[("window", sliding_window)] = memo
        return memo  # type: ignore[return-value]

    def ratio(self, ratio: int, overlap: bool) -> RatioIndices:
        """The indices of compress ratio `ratio` (`overlap`: windows of `2 * ratio` tokens)."""
        key = ("ratio", ratio * (2 if overlap else 1))
        memo = self._memo.get(key)
        if memo is None:
            memo = self._ratio(ratio, overlap)
            self._memo[key] = memo
        return memo  # type: ignore[return-value]

    def _ratio(self, ratio: int, overlap: bool) -> RatioIndices:
        dev = self.positions.device
        per_block = self.block_size // ratio
        closes = torch.nonzero((self.positions + 1) % ratio == 0).flatten()
        seq = self.token_seq[closes]
        entry = (self.positions[closes] + 1) // ratio - 1
        width = (2 if overlap else 1) * ratio
        first = self.positions[closes] + 1 - width
        pos = first[:, None] + torch.arange(width, device=dev)[None, :]
        window_slots = self.sliding_slots(seq[:, None].expand_as(pos), pos)
        entry_slots = self._entry_slots(seq, entry, ratio, per_block)
        count = (self.positions + 1) // ratio  # [T] visible entries per query
        n = int(count.max()) if count.numel() else 0
        j = torch.arange(n, device=dev)[None, :].expand(len(self.positions), n)
        seqs = self.token_seq[:, None].expand_as(j)
        visible = self._entry_slots(seqs, j, ratio, per_block)
        visible = visible.masked_fill(j >= count[:, None], -1)
        return RatioIndices(window_slots, entry_slots, entry * ratio, visible)

    def _entry_slots(
        self, seq: torch.Tensor, entry: torch.Tensor, ratio: int, per_block: int
    ) -> torch.Tensor:
        blocks = (entry * ratio // self.block_size).clamp(max=self.full_tables.shape[1] - 1)
        return self.full_tables[seq, blocks] * per_block + entry % per_block
