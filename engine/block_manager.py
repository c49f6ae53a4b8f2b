"""Paged KV-cache bookkeeping: fixed-size blocks, a free pool, reference counts and a prefix
cache.

The layout follows vLLM's PagedAttention (Kwon et al., 2023, "Efficient Memory Management for
Large Language Model Serving with PagedAttention"): a sequence's KV lives in `block_size`-token
blocks listed in its block table; token `p` of a sequence lives in slot
`block_table[p // block_size] * block_size + p % block_size`.

Prefix caching (as in vLLM's automatic prefix caching): every full block is identified by a hash
chained from its prefix, `sha256(parent_digest | block_token_ids | extra_key)`, so two requests with
the same leading tokens share those blocks (reference counts). A 256-bit digest makes a collision,
which would hand one request another's KV, practically impossible; Python's 64-bit `hash()` of the
same tuple did not (vLLM moved to sha256 for the same reason). A block whose count drops to zero
keeps its KV and hash in the free pool (`engine.block_pool`) until a later hit reuses it or new
tokens evict it. `engine.hybrid_block_manager` adds a second, sliding-window pool for models whose
cache has kinds of two lifetimes (DeepSeek-V4).
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass

from engine.block_pool import BlockPool
from engine.sequence import Sequence


@dataclass
class PrefixCacheStats:
    """Prefix-cache counters, in blocks: `queries` the full prompt blocks looked up (all of
    them, also past the first miss), `hits` those found; a sequence looked up again (admission
    that found no free blocks, a preempted sequence) counts again."""

    queries: int = 0
    hits: int = 0

    @property
    def hit_rate(self) -> float:
        """Hits / queries (0 before any query)."""
        return self.hits / self.queries if self.queries else 0.0


class BlockManager:
    """Allocates KV blocks to sequences (their `block_table`).

    Args:
        num_blocks: blocks in the cache.
        block_size: tokens per block.
        enable_prefix_caching: share identical full prefix blocks across sequences.

    Running out of blocks is a return value (`False`), never an exception: the scheduler then
    waits or preempts.

    Raises:
        ValueError: `num_blocks` or `block_size` is not positive.
    """

    def __init__(
        self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True
    ) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"num_blocks ({num_blocks}) and block_size ({block_size}) must be > 0")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks)
        self.stats = PrefixCacheStats()

    @property
    def num_free_blocks(self) -> int:
        """Blocks with no reference (cached ones included: they can be evicted)."""
        return self.pool.num_free

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def can_ever_fit(self, num_tokens: int) -> bool:
        """Whether a sequence of `num_tokens` tokens fits in the whole cache."""
        return self.blocks_needed(num_tokens) <= self.num_blocks

    def chain(self, seq: Sequence, upto_blocks: int) -> list[bytes]:
        """Digests of the sequence's first `upto_blocks` full blocks (memoised on the sequence).

        A block's digest chains its predecessor's, its token ids, the sequence's `cache_key` and
        the `content_hash` of every media item with a placeholder token in the block (as vLLM's
        `hash_block_tokens` adds multimodal hashes as extra keys), so two prompts with the same
        text and different images share no block from the first image on.
        """
        tokens = seq.token_ids()
        bs = self.block_size
        key = b"" if seq.cache_key is None else str(seq.cache_key).encode()
        while len(seq.block_hashes) < upto_blocks:
            i = len(seq.block_hashes)
            digest = hashlib.sha256(seq.block_hashes[-1] if seq.block_hashes else b"root")
            digest.update(array("q", tokens[i * bs : (i + 1) * bs]).tobytes())
            digest.update(key)
            for item in seq.media:  # placeholder tokens are equal for every image: key on it
                if item.offset < (i + 1) * bs and item.end > i * bs:
                    digest.update(item.content_hash)
            seq.block_hashes.append(digest.digest())
        return seq.block_hashes[:upto_blocks]

    def match_prefix(self, seq: Sequence) -> int:
        """Attach cached blocks for the longest cached prefix of a sequence with no blocks.

        At least one token is always left to compute (its logits are needed).

        Returns:
            Tokens whose KV came from the cache (also set as `seq.num_computed_tokens`).
        """
        assert not seq.block_table, "match_prefix on a sequence that holds blocks"
        if not self.enable_prefix_caching:
            return 0
        full = (seq.num_tokens - 1) // self.block_size
        self.stats.queries += full  # every block that could have hit, so hits / queries is
        for h in self.chain(seq, full):  # the share of the prompt served from the cache
            block = self.pool.take_cached(h)
            if block is None:
                break
            self.stats.hits += 1
            seq.block_table.append(block)
        seq.num_computed_tokens = len(seq.block_table) * self.block_size
        return seq.num_computed_tokens

    def ensure_capacity(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow `seq.block_table` to hold `num_tokens` tokens.

        Returns:
            True on success; False (and no change) when the free pool is too small.
        """
        missing = self.blocks_needed(num_tokens) - len(seq.block_table)
        if missing <= 0:
            return True
        if missing > self.pool.num_free:
            return False
        seq.block_table.extend(self.pool.allocate() for _ in range(missing))
        return True

    def commit(self, seq: Sequence) -> None:
        """Register the sequence's newly computed full blocks in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        full = seq.num_computed_tokens // self.block_size
        for i, h in enumerate(self.chain(seq, full)):
            self.pool.register(seq.block_table[i], h)

    def trim(self, seq: Sequence) -> None:
        """Release the blocks past those `seq.num_tokens` tokens need: after a speculative
        step, the blocks that held rejected draft tokens only. They were never registered in
        the prefix cache (`commit` registers only blocks full of computed tokens, and rejected
        tokens lie past `num_computed_tokens`)."""
        keep = self.blocks_needed(seq.num_tokens)
        for block in reversed(seq.block_table[keep:]):
            assert self.pool.ref_counts[block] == 1, f"a draft block {block} is shared"
            assert self.pool.digest_of[block] is None, f"a draft block {block} is cached"
            self.pool.release(block, reuse_first=True)  # nothing cached: reuse these first
        del seq.block_table[keep:]

    def free(self, seq: Sequence) -> None:
        """Release every block of `seq` (on finish, abort or preemption)."""
        for block in reversed(seq.block_table):
            self.pool.release(block)
        seq.block_table = []
        seq.num_computed_tokens = 0

    def usage(self) -> float:
        """Fraction of blocks referenced by running sequences, in [0, 1]."""
        return 1.0 - self.pool.num_free / self.num_blocks
