"""Continuous-batching scheduler with a per-step token budget, priorities and recompute
preemption.

Order is vLLM's priority policy (`--scheduling-policy priority`): every sequence sorts by
`(params.priority, arrival)` (`Sequence.sort_key`), a lower priority value first, equal ones first
come, first served; with every priority at its default 0 this is plain arrival order.

Each step, running sequences go first in that order (one decode token each, or the next chunk of
a prompt still in prefill), then waiting sequences are admitted in that order while the token
budget (`max_num_batched_tokens`), the sequence cap (`max_num_seqs`) and the free KV blocks allow;
with LoRA, a waiting sequence of a further adapter past `max_loras` is passed over. Prompts
longer than the remaining budget are prefilled in chunks over several steps; a chunk never ends
inside an image's or audio clip's placeholder tokens (the item waits for the next step, or, at
the head of a step, takes the step whole: `Sequence.prefill_end`). A decoding sequence
with speculative draft tokens (`engine.spec_decode`) runs them after its last token in the same
step when the budget and the free blocks allow, else decodes plainly. When a running sequence
needs a block and none is free, the least urgent running sequence (the largest sort key: the
lowest priority, newest among equals) is preempted: its blocks are freed and it goes back to the
waiting queue at its place in the order, to be recomputed. A waiting sequence never preempts a
running one, whatever its priority: it waits for blocks to free up.

The two limits are the scheduler's `limits`, the configured ones unless `engine.slo` is set:
then the engine's `SloController` lowers and raises them between steps (`set_limits`). A lowered
`max_num_seqs` only stops admission; sequences already running go on until they finish.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from dataclasses import dataclass

from engine.block_manager import BlockManager
from engine.sequence import Sequence, SequenceStatus
from engine.slo_controller import BatchLimits


@dataclass(frozen=True)
class ScheduledSeq:
    """One sequence's share of a step.

    Attributes:
        seq: the sequence.
        num_new_tokens: tokens whose KV is computed in this step (starting at
            `seq.num_computed_tokens`).
        sample: whether a token is sampled after this step (the chunk reaches the end of the
            known tokens).
        draft_token_ids: speculative draft tokens verified in this step: the last
            `len(draft_token_ids)` of the `num_new_tokens` (`engine.spec_decode`); then every
            one of its rows is sampled.
    """

    seq: Sequence
    num_new_tokens: int
    sample: bool
    draft_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class SchedulerOutput:
    """The batch for one step; `scheduled` is empty when there is nothing to run."""

    scheduled: tuple[ScheduledSeq, ...]
    num_preempted: int

    @property
    def num_tokens(self) -> int:
        """Tokens in the flattened batch."""
        return sum(s.num_new_tokens for s in self.scheduled)


class Scheduler:
    """Decides which sequences run in each step.

    Args:
        block_manager: KV block allocator.
        max_num_seqs: running sequences at most (the ceiling of `limits.max_num_seqs`).
        max_num_batched_tokens: tokens per step at most, prefill chunks plus decodes (the
            ceiling of `limits.max_num_batched_tokens`).
        max_loras: distinct LoRA adapters in the running batch at most (None: LoRA off);
            a waiting sequence of a further adapter is passed over until one finishes.
    """

    def __init__(
        self,
        block_manager: BlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_loras: int | None = None,
    ) -> None:
        self.block_manager = block_manager
        self.max_loras = max_loras
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.limits = BatchLimits(max_num_seqs, max_num_batched_tokens)
        self.waiting: deque[Sequence] = deque()  # kept sorted by `Sequence.sort_key`
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def set_limits(self, limits: BatchLimits) -> None:
        """Admit by `limits` from the next step on; each at least 1 and at most its configured
        value (`AssertionError` otherwise: the controller keeps them there)."""
        assert 1 <= limits.max_num_seqs <= self.max_num_seqs, f"{limits} over the configured"
        assert 1 <= limits.max_num_batched_tokens <= self.max_num_batched_tokens, (
            f"{limits} over the configured"
        )
        self.limits = limits

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence at its place in the waiting order."""
        seq.status = SequenceStatus.WAITING
        self._wait(seq)

    def _wait(self, seq: Sequence) -> None:
        """Put a waiting sequence (new or preempted) at its place in the waiting order."""
        bisect.insort(self.waiting, seq, key=lambda s: s.sort_key)

    def has_work(self) -> bool:
        """Whether any sequence is waiting or running."""
        return bool(self.waiting or self.running)

    def remove(self, seq: Sequence) -> None:
        """Take `seq` out of the queues and free its blocks (finish or abort)."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        self._wait(seq)
        self.num_preemptions += 1

    @staticmethod
    def _chunk(seq: Sequence, budget: int, first: bool) -> int:
        """Tokens of `seq` to compute this step: what is left, at most `budget`, cut so that
        no media item's placeholder run is split over two chunks (`Sequence.prefill_end`; the
        step's first chunk may exceed `budget` to take a whole item)."""
        start = seq.num_computed_tokens
        end = start + min(seq.num_tokens - start, budget)
        if seq.media:
            end = seq.prefill_end(start, end, may_exceed=first)
        return end - start

    def _draft(self, seq: Sequence, n: int, budget: int) -> tuple[int, ...]:
        """The draft tokens a decoding sequence verifies this step, as many as the token
        budget and free blocks allow: a draft never preempts anyone."""
        if not seq.draft_token_ids or n != 1 or seq.num_tokens - seq.num_computed_tokens != 1:
            return ()
        draft = tuple(seq.draft_token_ids[: budget - 1])
        if draft and self.block_manager.ensure_capacity(seq, seq.num_tokens + len(draft)):
            return draft
        return ()

    def schedule(self) -> SchedulerOutput:
        """Build the next step's batch."""
        budget = self.limits.max_num_batched_tokens
        scheduled: list[ScheduledSeq] = []
        preempted = 0
        # Most urgent first, so preemption (which takes the last) spares the most urgent.
        self.running.sort(key=lambda s: s.sort_key)
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = self._chunk(seq, budget, first=not scheduled)
            if n == 0:  # a media item that does not fit what is left of the budget
                i += 1
                continue
            draft = self._draft(seq, n, budget)
            target = seq.num_computed_tokens + n
            while not self.block_manager.ensure_capacity(seq, target):
                victim = self.running[-1]
                self._preempt(victim)
                preempted += 1
                if victim is seq:
                    break
            if seq.status is not SequenceStatus.RUNNING:
                break
            scheduled.append(ScheduledSeq(seq, n + len(draft), target == seq.num_tokens, draft))
            budget -= n + len(draft)
            i += 1
        # Freshly preempted work waits until the cache has room again.
        adapters = {s.lora_id for s in self.running if s.lora_id is not None}
        passed_over: list[Sequence] = []
        max_seqs = self.limits.max_num_seqs
        while not preempted and self.waiting and budget > 0 and len(self.running) < max_seqs:
            seq = self.waiting[0]
            if seq.lora_id is not None and seq.lora_id not in adapters:
                if self.max_loras is not None and len(adapters) >= self.max_loras:
                    passed_over.append(self.waiting.popleft())
                    continue
                adapters.add(seq.lora_id)
            if not seq.block_table and seq.params.prompt_logprobs is None:
                # prompt logprobs need every prompt position computed, so no cache hits then
                self.block_manager.match_prefix(seq)
            n = self._chunk(seq, budget, first=not scheduled)
            if n == 0:  # its next media item waits for a step with the budget for it
                self.block_manager.free(seq)
                break
            target = seq.num_computed_tokens + n
            if not self.block_manager.ensure_capacity(seq, target):
                self.block_manager.free(seq)  # do not hold cache hits while waiting
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            if seq.scheduled_at is None:
                seq.scheduled_at = time.monotonic()
                seq.num_cached_tokens = seq.num_computed_tokens
            self.running.append(seq)
            scheduled.append(ScheduledSeq(seq, n, target == seq.num_tokens))
            budget -= n
        self.waiting.extendleft(reversed(passed_over))
        return SchedulerOutput(tuple(scheduled), preempted)
