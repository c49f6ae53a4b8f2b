"""A pool of KV blocks: reference counts, a least-recently-used free list and the prefix-cache
registry of block digests.

A block whose count drops to zero keeps its KV and digest and joins the free list at its
most-recently-used end; it is reused on a later prefix hit (`take_cached`) or evicted (its digest
forgotten) when `allocate` hands it out for new tokens, least recently used first (vLLM's
`BlockPool` and free-block queue, `vllm/v1/core/block_pool.py`). `engine.block_manager` keeps
one pool per group of cache kinds that share a block table.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    """`num_blocks` blocks, ids `0 .. num_blocks - 1`.

    Raises:
        ValueError: `num_blocks <= 0`.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks ({num_blocks}) must be > 0")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.free_blocks: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.digest_of: list[bytes | None] = [None] * num_blocks
        self.cached: dict[bytes, int] = {}  # block digest -> block id

    @property
    def num_free(self) -> int:
        """Blocks with no reference (cached ones included: they can be evicted)."""
        return len(self.free_blocks)

    def take_cached(self, digest: bytes) -> int | None:
        """One more reference to the block cached under `digest`, or None if none is."""
        block = self.cached.get(digest)
        if block is None:
            return None
        if self.ref_counts[block] == 0:
            del self.free_blocks[block]
        self.ref_counts[block] += 1
        return block

    def allocate(self) -> int:
        """A free block (least recently used first, evicted from the prefix cache), with one
        reference. The caller checks `num_free` first."""
        block, _ = self.free_blocks.popitem(last=False)
        assert self.ref_counts[block] == 0, f"free block {block} has references"
        old = self.digest_of[block]
        if old is not None:  # evict: its KV is about to be overwritten
            del self.cached[old]
            self.digest_of[block] = None
        self.ref_counts[block] = 1
        return block

    def register(self, block: int, digest: bytes) -> None:
        """Cache `block` under `digest` unless it, or another block of that digest, already is."""
        if self.digest_of[block] is None and digest not in self.cached:
            self.digest_of[block] = digest
            self.cached[digest] = block

    def release(self, block: int, reuse_first: bool = False) -> None:
        """Drop one reference; at zero the block joins the free list, at its most recently used
        end, or at its reuse-first end when `reuse_first` (a block that holds nothing worth
        keeping)."""
        assert self.ref_counts[block] > 0, f"double free of block {block}"
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self.free_blocks[block] = None
            if reuse_first:
                self.free_blocks.move_to_end(block, last=False)
