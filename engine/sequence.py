"""State of one request inside the engine."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from engine.multimodal.inputs import MediaItem
from engine.outputs import TokenLogprob
from engine.sampling_params import SamplingParams
from engine.spec_decode.state import SpecState


class SequenceStatus(enum.Enum):
    """Where a sequence is in its life."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """One request's tokens, KV blocks and progress.

    Attributes:
        request_id: caller-chosen id.
        prompt_token_ids: the prompt, in tokens.
        params: sampling parameters.
        arrival: monotonically increasing arrival number (lower = older); among sequences of
            equal `params.priority` the older one runs first (`sort_key`).
        output_token_ids: generated tokens so far.
        block_table: KV-cache block ids holding this sequence's tokens, in order.
        sliding_table: a hybrid cache's sliding-window block ids, one per token block, -1
            for blocks released once out of the window (`engine.hybrid_block_manager`);
            empty for other models.
        num_computed_tokens: tokens whose KV is already in the cache.
        generator: a seeded RNG when the request has a seed.
        prompt_logprobs: logprobs of prompt tokens 1.. collected so far (prefill may be chunked).
        prompt_logprobs_sent: whether they went out with the first output.
        block_hashes: prefix-cache hashes (sha256 digests) of the sequence's full blocks,
            chained.
        cache_key: anything besides token ids that changes the KV (e.g. a LoRA id), hashed
            into every block; None for the base model.
        lora_id: the adapter the sequence runs under (`engine.lora.adapter.LoraRef.lora_id`),
            None for the base model; also its `cache_key`.
        scheduled_at: when the scheduler first admitted it to the running batch
            (`time.monotonic()` seconds; a preempted sequence keeps its first), or None.
        num_cached_tokens: prompt tokens whose KV came from the prefix cache when the
            scheduler first admitted it (what usage reports as cached; a preempted sequence
            keeps its first count).
        draft_token_ids: speculative draft tokens proposed for its next decode step
            (`engine.spec_decode`); not part of the sequence until verified.
        spec: its speculation state (acceptance average, token mirror); None until the
            speculator first sees it, and always with speculation off.
        media: the prompt's images and audio clips, by offset (`engine.multimodal.inputs`);
            empty for a text prompt.
    """

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival: int
    output_token_ids: list[int] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    sliding_table: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    status: SequenceStatus = SequenceStatus.WAITING
    generator: torch.Generator | None = None
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)
    cache_key: int | None = None
    lora_id: int | None = None
    prompt_logprobs_sent: bool = False
    scheduled_at: float | None = None
    num_cached_tokens: int = 0
    draft_token_ids: list[int] = field(default_factory=list)
    spec: SpecState | None = None
    media: tuple[MediaItem, ...] = ()
    _tokens: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._tokens = [*self.prompt_token_ids, *self.output_token_ids]

    def append_output(self, token: int) -> None:
        """Record one generated token (the only way outputs grow, so `token_ids` stays whole)."""
        self.output_token_ids.append(token)
        self._tokens.append(token)

    def prefill_end(self, start: int, end: int, may_exceed: bool) -> int:
        """Where a prefill chunk `[start, end)` may end without splitting a media item.

        An item that straddles `end` moves the end back to the item's first token; one that
        began at or before `start` (the chunk starts inside or at it) cannot move back, so the
        chunk ends after it when `may_exceed` (the step's first chunk: the engine refused items
        longer than the configured token budget when the request came) and at `start` (no
        chunk this step) otherwise.

        Returns:
            The chunk's end, `start <= result`; `end` when no item straddles it.
        """
        for item in self.media:
            if item.offset < end < item.end:
                if item.offset > start:
                    return item.offset
                return item.end if may_exceed else start
        return end

    @property
    def sort_key(self) -> tuple[int, int]:
        """Scheduling order `(params.priority, arrival)`: the smaller runs first."""
        return (self.params.priority, self.arrival)

    @property
    def num_prompt_tokens(self) -> int:
        """Prompt length in tokens."""
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_ids(self) -> list[int]:
        """All tokens, prompt then output: one list kept up to date, not a new one per call
        (read it, do not change it)."""
        return self._tokens
