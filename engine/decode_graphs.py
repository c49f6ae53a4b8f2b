"""Decode steps padded to a fixed set of batch sizes, so each size is one captured graph.

A decode step of `D` tokens, every one a generated token (one per sequence, or a sequence's last
token and its speculative draft tokens, `engine.spec_decode`: the model runner attends each
generated token on its own as a decode row), runs as the graph of the smallest configured size
`B >= D` (`graph_batch_sizes`, as vLLM's `cudagraph_capture_sizes`): `B - D` padding rows are
added, each a one-token sequence over the reserved padding block that no request owns, and every
block table is padded to the longest a sequence can have (`max_model_len / block_size` blocks).
Every input of the graph then has a shape that depends on `B` only, so each size is compiled once
(`npu_ops.graph_mode`, in the background while the engine serves, `engine.graph_capture`) and
replayed; until its graph is compiled, a step of that size runs eager.

Padding rows cost their share of a step's work but never touch a request's KV blocks or results:
they write into the padding block only, and the kernels on the decode path compute every row on
its own (batch-invariant GEMM, per-sequence attention), so a request's tokens do not depend on how
much padding shares its step. Steps with prompt tokens (prefill, chunked prefill, a decode row that
recomputes a prompt token), decode steps of more tokens than the largest size and steps with a
LoRA request (`engine.lora`: the graphs are captured without adapters) run eager.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from engine.step_input import StepInput


@dataclass(frozen=True)
class DecodeGraphSpec:
    """Which decode steps run as captured graphs.

    Attributes:
        batch_sizes: the sizes captured, ascending, each > 0.
        max_blocks_per_seq: block-table width of every graph step (`ceil(max_model_len /
            block_size)`).
        cache_dir: inductor's on-disk compile cache (None: inductor's default).
    """

    batch_sizes: tuple[int, ...]
    max_blocks_per_seq: int
    cache_dir: str | None = None

    def bucket(self, step: StepInput) -> int | None:
        """The size `step` runs at, or None when it runs eager (not a step of generated tokens
        only, more tokens than every size, or with a LoRA request)."""
        n = len(step.token_ids)
        if n == 0 or n > self.batch_sizes[-1]:
            return None
        if any(s < p for s, p in zip(step.starts, step.prompt_lens, strict=True)):
            return None
        if step.lora_ids:  # LoRA updates run eager (`engine.lora.layer`); graphs hold none
            return None
        return self.batch_sizes[bisect.bisect_left(self.batch_sizes, n)]


def pad_decode_step(step: StepInput, size: int, pad_block: int) -> StepInput:
    """`step` with `size - len(step.token_ids)` padding sequences appended.

    Each padding sequence holds one generated token (id 0) at position 1 of the padding block
    `pad_block`, so its context is 2 tokens and it is a generated row like the real ones. `rows`
    is unchanged: padding rows produce no logits.

    Raises:
        ValueError: the step already has more than `size` tokens.
    """
    pad = size - len(step.token_ids)
    if pad < 0:
        raise ValueError(f"a decode step of {len(step.token_ids)} tokens padded to {size}")
    return StepInput(
        token_ids=step.token_ids + [0] * pad,
        starts=step.starts + [1] * pad,
        q_lens=step.q_lens + [1] * pad,
        block_tables=step.block_tables + [[pad_block]] * pad,
        rows=step.rows,
        prompt_lens=step.prompt_lens + [1] * pad,
        lora_ids=step.lora_ids + (None,) * pad if step.lora_ids else (),
    )
