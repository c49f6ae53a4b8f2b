"""Blocks for a hybrid KV cache: kinds that grow with the context and kinds that slide with it.

DeepSeek-V4 (`engine.deepseek_v4.cache`) caches two groups of kinds, each in a block pool of its
own (vLLM's hybrid allocator does the same with one "KV cache group" per lifetime,
`vllm/v1/core/kv_cache_coordinator.py`):

- **full**: the compressed KV entries per compress ratio and the indexer keys. They grow with the
  context (one entry per `ratio` tokens) and live as long as the sequence, so block `i` of
  `seq.block_table` holds the entries of the windows that start in tokens
  `[i * block_size, (i + 1) * block_size)`: `block_size // ratio` entries per kind and layer
  (`block_size` must be a multiple of every ratio, so that a window never straddles blocks).
- **sliding**: per token, the sliding-window KV and the compressor state (the projections a
  window's entry is pooled from). Only the last `span` tokens before the next one to compute are
  ever read again, so once a block of `seq.sliding_table` lies wholly before that it goes back to
  the pool while the sequence runs (its entry becomes -1).

Both tables are indexed by token block: block `i` of either covers tokens
`[i * block_size, (i + 1) * block_size)`, and both register their full blocks under the same
chained digest (`engine.block_manager`). A prefix hit of `k` blocks needs the `k` full blocks
*and* the sliding blocks covering the `span` tokens before `k * block_size` (the window the
next token attends to, the compressor state of any unfinished window, the previous window a
compress-ratio-4 entry overlaps); the hit is cut back to the longest prefix for which both are
cached. A hit restores exactly the state that computing the prefix would have written, so it
gives the same tokens as no hit. Speculative tokens and chunk boundaries need no rollback: every
kind is addressed by token position, so a recomputed position overwrites what a rejected one
wrote.
"""

from __future__ import annotations

from engine.block_manager import BlockManager
from engine.block_pool import BlockPool
from engine.sequence import Sequence


class HybridBlockManager(BlockManager):
    """A `BlockManager` for the full group plus a sliding-window pool.

    Args:
        num_blocks: full-group blocks.
        block_size: tokens per block (both groups).
        sliding_blocks: sliding-group blocks.
        span: tokens before the next one to compute that the sliding kinds are read for.
        enable_prefix_caching: share identical prefix blocks of both groups.

    Raises:
        ValueError: a count is not positive or `span` is negative.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        sliding_blocks: int,
        span: int,
        enable_prefix_caching: bool = True,
    ) -> None:
        super().__init__(num_blocks, block_size, enable_prefix_caching)
        if span < 0:
            raise ValueError(f"span ({span}) must be >= 0")
        self.sliding = BlockPool(sliding_blocks)
        self.span = span

    @property
    def num_free_sliding_blocks(self) -> int:
        """Sliding-group blocks with no reference."""
        return self.sliding.num_free

    def _first_live(self, num_tokens: int) -> int:
        """The first sliding block still read once `num_tokens` tokens are computed."""
        return max(0, num_tokens - self.span) // self.block_size

    def match_prefix(self, seq: Sequence) -> int:
        """`BlockManager.match_prefix`, cut back to the longest hit whose sliding blocks are
        cached too; attaches both groups' blocks."""
        super().match_prefix(seq)
        hit = len(seq.block_table)
        digests = seq.block_hashes
        while hit and not all(
            digests[i] in self.sliding.cached
            for i in range(self._first_live(hit * self.block_size), hit)
        ):
            hit -= 1
        for block in seq.block_table[hit:]:
            self.pool.release(block)
            self.stats.hits -= 1
        del seq.block_table[hit:]
        first = self._first_live(hit * self.block_size)
        seq.sliding_table = [-1] * first
        for i in range(first, hit):
            cached = self.sliding.take_cached(digests[i])
            assert cached is not None, "the hit was cut back to cached sliding blocks"
            seq.sliding_table.append(cached)
        seq.num_computed_tokens = hit * self.block_size
        return seq.num_computed_tokens

    def ensure_capacity(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow both tables to hold `num_tokens` tokens; False (and no change) when either
        pool is too small."""
        needed = self.blocks_needed(num_tokens)
        sliding_missing = needed - len(seq.sliding_table)
        full_missing = needed - len(seq.block_table)
        if sliding_missing > self.sliding.num_free or full_missing > self.pool.num_free:
            return False
        if not super().ensure_capacity(seq, num_tokens):
            return False
        seq.sliding_table.extend(self.sliding.allocate() for _ in range(max(0, sliding_missing)))
        return True

    def commit(self, seq: Sequence) -> None:
        """Register newly computed full blocks of both groups, then release the sliding blocks
        that fell out of the span."""
        super().commit(seq)
        full = seq.num_computed_tokens // self.block_size
        if self.enable_prefix_caching:
            for i, digest in enumerate(self.chain(seq, full)):
                if seq.sliding_table[i] >= 0:
                    self.sliding.register(seq.sliding_table[i], digest)
        # released blocks are a prefix of -1s: walk back from the first live block to it, so a
        # step costs the blocks it releases, not the sequence's length
        first = self._first_live(seq.num_computed_tokens)
        start = first
        while start > 0 and seq.sliding_table[start - 1] >= 0:
            start -= 1
        for i in range(start, first):
            self.sliding.release(seq.sliding_table[i])
            seq.sliding_table[i] = -1

    def trim(self, seq: Sequence) -> None:
        """`BlockManager.trim` for both groups."""
        super().trim(seq)
        keep = self.blocks_needed(seq.num_tokens)
        for block in reversed(seq.sliding_table[keep:]):
            if block >= 0:
                self.sliding.release(block, reuse_first=True)
        del seq.sliding_table[keep:]

    def free(self, seq: Sequence) -> None:
        """Release every block of both groups."""
        for block in reversed(seq.sliding_table):
            if block >= 0:
                self.sliding.release(block)
        seq.sliding_table = []
        super().free(seq)

    def usage(self) -> float:
        """The fuller group's fraction of referenced blocks, in [0, 1]."""
        sliding = 1.0 - self.sliding.num_free / self.sliding.num_blocks
        return max(super().usage(), sliding)
