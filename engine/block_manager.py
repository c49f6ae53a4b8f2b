"""Paged KV-cache bookkeeping: fixed-size blocks, a free pool and reference counts.

The layout follows vLLM's PagedAttention (Kwon et al., 2023, "Efficient Memory Management for
Large Language Model Serving with PagedAttention"): a sequence's KV lives in `block_size`-token
blocks listed in its block table; token `p` of a sequence lives in slot
`block_table[p // block_size] * block_size + p % block_size`.
"""

from __future__ import annotations

from collections import deque

from engine.sequence import Sequence


class BlockManager:
    """Allocates KV blocks to sequences.

    Args:
        num_blocks: blocks in the cache.
        block_size: tokens per block.

    Running out of blocks is a return value (`False`), never an exception: the scheduler then
    waits or preempts.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"num_blocks ({num_blocks}) and block_size ({block_size}) must be > 0")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free pool."""
        return len(self._free)

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def can_ever_fit(self, num_tokens: int) -> bool:
        """Whether a sequence of `num_tokens` tokens fits in the whole cache."""
        return self.blocks_needed(num_tokens) <= self.num_blocks

    def ensure_capacity(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow `seq.block_table` to hold `num_tokens` tokens.

        Returns:
            True on success; False (and no change) when the free pool is too small.
        """
        missing = self.blocks_needed(num_tokens) - len(seq.block_table)
        if missing <= 0:
            return True
        if missing > len(self._free):
            return False
        for _ in range(missing):
            block = self._free.popleft()
            assert self.ref_counts[block] == 0, f"free block {block} has references"
            self.ref_counts[block] = 1
            seq.block_table.append(block)
        return True

    def free(self, seq: Sequence) -> None:
        """Release every block of `seq` (on finish, abort or preemption)."""
        for block in reversed(seq.block_table):
            assert self.ref_counts[block] > 0, f"double free of block {block}"
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self._free.append(block)
        seq.block_table = []
        seq.num_computed_tokens = 0

    def usage(self) -> float:
        """Fraction of blocks in use, in [0, 1]."""
        return 1.0 - len(self._free) / self.num_blocks
