"""DeepSeek-V4's hybrid KV cache: one `KVCacheSpec` per kind, grouped by lifetime.

Per layer (transformers `modeling_deepseek_v4.py`; the DeepSeek-V4 report, section 2.3; vLLM's
"DeepSeek V4 in vLLM" post for the kinds):

- `swa` (every layer, sliding group): one `head_dim` K=V vector per token;
- `state_c{r}` (compressed layers of ratio `r`, sliding): per token, the compressor's `kv_proj`
  and `gate_proj` outputs (`2 * head_dim` each at ratio 4, where windows overlap; `head_dim`
  each otherwise);
- `indexer_state` (ratio-4 layers, sliding): per token, the indexer's `kv_proj` and `gate_proj`
  outputs (`2 * index_head_dim` each);
- `compressed_c{r}` (ratio `r`, full group): one pooled `head_dim` entry per `r` tokens;
- `indexer_keys` (ratio 4, full group): one pooled `index_head_dim` key per 4 tokens.

The full group grows with the context: its bytes per token are the sum of
`entry_bytes / ratio`, about 6,880 B at DeepSeek-V4-Flash's shape in bfloat16 (21 ratio-4 layers
x (512 + 128) x 2 B / 4 + 20 ratio-128 layers x 512 x 2 B / 128), against V3's 70,272 B of MLA
latent. The sliding group is a fixed cost per running sequence: its kinds are read for the last
`span` tokens only (`sliding_window - 1` for attention, up to `ratio` for a compressor's
unfinished or overlapped window), and its blocks go back to the pool as the sequence moves on
(`engine.hybrid_block_manager`). Compressor state is kept per token rather than as a running
buffer so that a window split across chunks, a prefix hit or a rejected speculative token never
needs a rollback: a window's entry is pooled from the state of its own tokens when its last token
is computed.

`block_size` must be a multiple of every compress ratio (a block then holds
`block_size // ratio` entries of each compressed kind, and no window straddles two blocks):
DeepSeek-V4's 4 and 128 need a multiple of 128, as vLLM-Ascend runs it (`--block-size 128`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from transformers import PretrainedConfig

from engine.kv_cache import KVCacheSpec

CSA = "compressed_sparse_attention"
HCA = "heavily_compressed_attention"
SLIDING = "sliding_attention"


class V4LayerCache(NamedTuple):
    """One layer's tensors (rows are slots: `block * block_size + offset` for per-token kinds,
    `block * (block_size // ratio) + entry` for compressed ones); None where the layer has no
    such kind.

    Attributes:
        swa: `[sliding_slots, head_dim]` K=V per token.
        state_kv / state_gate: `[sliding_slots, c * head_dim]` compressor projections
            (`c` = 2 at ratio 4, else 1).
        compressed: `[full_blocks * block_size // ratio, head_dim]` pooled entries.
        indexer_state_kv / indexer_state_gate: `[sliding_slots, 2 * index_head_dim]`.
        indexer_keys: `[full_blocks * block_size // 4, index_head_dim]`.
    """

    swa: torch.Tensor
    state_kv: torch.Tensor | None = None
    state_gate: torch.Tensor | None = None
    compressed: torch.Tensor | None = None
    indexer_state_kv: torch.Tensor | None = None
    indexer_state_gate: torch.Tensor | None = None
    indexer_keys: torch.Tensor | None = None


@dataclass(frozen=True)
class HybridKVSpec:
    """DeepSeek-V4's cache geometry (the same on every tensor-parallel rank: one KV head).

    Attributes:
        kinds: one spec per kind (see the module docstring).
        layer_types: per layer, `sliding_attention`, `compressed_sparse_attention` or
            `heavily_compressed_attention`.
        compress_rates: layer type -> compress ratio.
        sliding_window: tokens each query attends to raw (itself included).
        span: tokens before the next one to compute that the sliding kinds are read for.
        head_dim / index_head_dim: entry widths.
        dtype: cache element type.
        sliding_blocks: blocks of the sliding group (`sliding_blocks_for`); 0 until sized.
    """

    kinds: tuple[KVCacheSpec, ...]
    layer_types: tuple[str, ...]
    compress_rates: tuple[tuple[str, int], ...]
    sliding_window: int
    span: int
    head_dim: int
    index_head_dim: int
    dtype: torch.dtype
    sliding_blocks: int = 0
    latent = False
    hybrid = True

    @classmethod
    def from_config(cls, config: PretrainedConfig, dtype: torch.dtype) -> HybridKVSpec:
        """The kinds of a `deepseek_v4` config (transformers `DeepseekV4Config`)."""
        types = tuple(config.layer_types)
        rates = dict(config.compress_rates)
        d, di = int(config.head_dim), int(config.index_head_dim)
        kinds = [KVCacheSpec(len(types), 1, d, 0, dtype, name="swa", sliding=True)]
        span = int(config.sliding_window) - 1
        for kind in (CSA, HCA):
            layers = sum(t == kind for t in types)
            if not layers:
                continue
            r = int(rates[kind])
            c = 2 if kind == CSA else 1
            kinds.append(
                KVCacheSpec(layers, 1, c * d, c * d, dtype, name=f"state_c{r}", sliding=True)
            )
            kinds.append(
                KVCacheSpec(layers, 1, d, 0, dtype, name=f"compressed_c{r}", compress_ratio=r)
            )
            span = max(span, r if kind == CSA else r - 1)
            if kind == CSA:
                kinds.append(
                    KVCacheSpec(
                        layers, 1, 2 * di, 2 * di, dtype, name="indexer_state", sliding=True
                    )
                )
                kinds.append(
                    KVCacheSpec(layers, 1, di, 0, dtype, name="indexer_keys", compress_ratio=r)
                )
        return cls(
            tuple(kinds),
            types,
            tuple(rates.items()),
            int(config.sliding_window),
            span,
            d,
            di,
            dtype,
        )

    def ratio(self, layer_type: str) -> int:
        """The compress ratio of a compressed layer type."""
        return dict(self.compress_rates)[layer_type]

    def check_block_size(self, block_size: int) -> None:
        """Raises ValueError unless `block_size` is a multiple of every compress ratio."""
        for kind in self.kinds:
            if block_size % kind.compress_ratio:
                raise ValueError(
                    f"block_size {block_size} is not a multiple of DeepSeek-V4's compress ratio "
                    f"{kind.compress_ratio} ({kind.name}): a block must hold whole compression "
                    f"windows; use a multiple of {max(k.compress_ratio for k in self.kinds)}"
                )

    def bytes_per_token(self) -> float:
        """Bytes one more token of context costs (the full group's kinds)."""
        return sum(k.bytes_per_token() for k in self.kinds if not k.sliding)

    def bytes_per_block(self, block_size: int) -> int:
        """Bytes of one full-group block."""
        return sum(k.bytes_per_block(block_size) for k in self.kinds if not k.sliding)

    def sliding_bytes_per_block(self, block_size: int) -> int:
        """Bytes of one sliding-group block."""
        return sum(k.bytes_per_block(block_size) for k in self.kinds if k.sliding)

    def sliding_pool_bytes(self, block_size: int) -> int:
        """Bytes of the sliding-window pool (`sliding_blocks` blocks), set aside before the
        full pool is sized (`engine.kv_budget`)."""
        return self.sliding_blocks * self.sliding_bytes_per_block(block_size)

    def sliding_blocks_per_sequence(self, block_size: int) -> int:
        """Sliding blocks a sequence holds between steps at most: those covering its last
        `span` tokens, the block of its next token included."""
        return -(-self.span // block_size) + 1

    def sliding_blocks_for(
        self, max_num_seqs: int, max_num_batched_tokens: int, block_size: int
    ) -> int:
        """The sliding pool: twice what `max_num_seqs` running sequences hold between steps
        (the second half keeps the windows of finished prefixes for prefix hits), plus the
        blocks one step's `max_num_batched_tokens` new tokens write."""
        held = max_num_seqs * self.sliding_blocks_per_sequence(block_size)
        return 2 * held + -(-max_num_batched_tokens // block_size) + max_num_seqs

    def bytes_per_sequence(self, num_tokens: int, block_size: int) -> int:
        """Bytes a sequence of `num_tokens` computed tokens holds: its full-group blocks and
        the sliding blocks of its last `span` tokens."""
        blocks = -(-num_tokens // block_size)
        first_live = max(0, num_tokens - self.span) // block_size
        return blocks * self.bytes_per_block(block_size) + (
            blocks - first_live
        ) * self.sliding_bytes_per_block(block_size)

    def describe(self) -> str:
        """The kinds in words, for the start-up log line."""
        return (
            "hybrid: "
            + ", ".join(k.describe() for k in self.kinds)
            + (f"; sliding window {self.sliding_window}, span {self.span} tokens")
        )

    def allocate(
        self, num_blocks: int, block_size: int, device: torch.device
    ) -> list[V4LayerCache]:
        """Zeroed tensors for `num_blocks` full-group and `sliding_blocks` sliding blocks (as many
        sliding as full blocks while `sliding_blocks` is unsized, 0). A sized pool always holds a
        profiling step's one sequence: it has a step's worth of blocks
        (`sliding_blocks_for`)."""
        self.check_block_size(block_size)
        slots = (self.sliding_blocks or num_blocks) * block_size

        def zeros(rows: int, width: int) -> torch.Tensor:
            return torch.zeros(rows, width, dtype=self.dtype, device=device)

        caches = []
        for kind in self.layer_types:
            if kind == SLIDING:
                caches.append(V4LayerCache(zeros(slots, self.head_dim)))
                continue
            r = self.ratio(kind)
            c = 2 if kind == CSA else 1
            entries = num_blocks * (block_size // r)
            caches.append(
                V4LayerCache(
                    zeros(slots, self.head_dim),
                    zeros(slots, c * self.head_dim),
                    zeros(slots, c * self.head_dim),
                    zeros(entries, self.head_dim),
                    *(
                        (
                            zeros(slots, 2 * self.index_head_dim),
                            zeros(slots, 2 * self.index_head_dim),
                            zeros(entries, self.index_head_dim),
                        )
                        if kind == CSA
                        else ()
                    ),
                )
            )
        return caches
