"""What every rank needs to run one step: the scheduler's decision as plain data.

The scheduler lives with the engine (rank 0's side); tensor-parallel ranks receive this object
and run the identical forward pass on their shard.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.multimodal.inputs import MediaItem
from engine.scheduler import SchedulerOutput


@dataclass(frozen=True)
class StepInput:
    """One flattened batch.

    Attributes:
        token_ids: `[T]` tokens of every scheduled sequence, concatenated (a speculating
            sequence's draft tokens after its known ones).
        starts: per sequence, the position of its first token in this step (tokens already in
            the KV cache).
        q_lens: per sequence, tokens in this step.
        block_tables: per sequence, its KV block ids.
        rows: indices into the flattened batch whose logits are needed.
        prompt_lens: per sequence, its prompt length (tokens at positions past it were
            generated; see `engine.forward_context`).
        lora_ids: per sequence, its LoRA adapter id (None: the base model); empty when no
            sequence of the step has one.
        sliding_tables: per sequence, its sliding-window block ids (-1: released) for a
            hybrid KV cache (`engine.hybrid_block_manager`); empty for other models.
        return_hidden: also return every token's final hidden state
            (`engine.step_result.StepResult.hidden`; the MTP drafter reads them).
        media: per sequence, its prompt's media items (`engine.sequence.Sequence.media`),
            which the runner encodes where they fall in the step's prefill rows and, for an
            M-RoPE model, places the sequence's rows by; empty when no sequence of the step has
            media.
        request_ids: per sequence, its request id (the encoder cache keeps outputs per request
            during its prefill); empty when `media` is.
    """

    token_ids: list[int]
    starts: list[int]
    q_lens: list[int]
    block_tables: list[list[int]]
    rows: list[int]
    prompt_lens: list[int]
    lora_ids: tuple[int | None, ...] = ()
    sliding_tables: tuple[tuple[int, ...], ...] = ()
    return_hidden: bool = False
    media: tuple[tuple[MediaItem, ...], ...] = ()
    request_ids: tuple[str, ...] = ()

    @classmethod
    def from_schedule(
        cls, batch: SchedulerOutput, rows: list[int], return_hidden: bool = False
    ) -> StepInput:
        """Extract the step's data from scheduled sequences (`rows`, `return_hidden`: see the
        attributes)."""
        token_ids: list[int] = []
        lora_ids = tuple(s.seq.lora_id for s in batch.scheduled)
        with_media = any(s.seq.media for s in batch.scheduled)
        for s in batch.scheduled:
            start = s.seq.num_computed_tokens
            known = s.num_new_tokens - len(s.draft_token_ids)
            token_ids.extend(s.seq.token_ids()[start : start + known])
            token_ids.extend(s.draft_token_ids)  # speculative: verified in this step
        return cls(
            token_ids=token_ids,
            starts=[s.seq.num_computed_tokens for s in batch.scheduled],
            q_lens=[s.num_new_tokens for s in batch.scheduled],
            block_tables=[list(s.seq.block_table) for s in batch.scheduled],
            rows=rows,
            prompt_lens=[s.seq.num_prompt_tokens for s in batch.scheduled],
            lora_ids=lora_ids if any(i is not None for i in lora_ids) else (),
            sliding_tables=tuple(
                tuple(s.seq.sliding_table) for s in batch.scheduled if s.seq.sliding_table
            ),
            return_hidden=return_hidden,
            media=tuple(s.seq.media for s in batch.scheduled) if with_media else (),
            request_ids=tuple(s.seq.request_id for s in batch.scheduled) if with_media else (),
        )
