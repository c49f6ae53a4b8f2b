"""Decides which sequences speculate, asks the proposer for their drafts, keeps the counters.

It owns speculative decoding's part of the engine step (`docs/engine-step.md`): `verify`
keeps the part of a sequence's draft the target agrees with, at postprocessing, and counts it
(`record`); `follow_step`, once per step after its outputs, hands the step to `after_step`,
which picks the sequences that may speculate and how many tokens (`k`), and the proposer
(`engine.spec_decode.ngram.NgramProposer`, or `engine.spec_decode.model_proposer.ModelProposer`
for `draft` and `mtp`) sets their drafts. The scheduler runs a draft in the sequence's next
step, and its rows are sampling rows (`engine.postprocess.sampling_rows`).

A sequence gets no draft when it has a grammar constraint (constrained decoding runs without
speculation: the grammar would have to accept the draft tokens before they are verified and
roll back the rejected ones), when it has turned speculation off (its acceptance average fell
below `min_acceptance_rate`, see `engine.spec_decode.state`), when the proposer has nothing
(no earlier n-gram match; no free block for the draft model's KV), or when it has room for no
more than one more token (`max_tokens`, context length): a draft never makes a step emit more
tokens than the request may still have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from configs.speculative_config import SpeculativeConfig
from engine.scheduler import ScheduledSeq, SchedulerOutput
from engine.sequence import Sequence, SequenceStatus
from engine.spec_decode.rejection import Verified, verify
from engine.spec_decode.state import SpecState
from engine.step_input import StepInput


@dataclass(frozen=True)
class SpecDecodeStats:
    """Speculation counters since start-up (vLLM's `SpecDecodingStats`).

    Attributes:
        num_drafts: drafts verified (one per speculating sequence per step).
        num_draft_tokens: draft tokens verified.
        num_accepted_tokens: draft tokens the target kept.
        num_accepted_tokens_per_pos: per draft position 0..k-1, drafts whose token at that
            position was kept.
    """

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    num_accepted_tokens_per_pos: tuple[int, ...]


@dataclass(frozen=True)
class StepView:
    """What a proposer may read of the step that just ran.

    Attributes:
        step: the step's flattened input (the target ran it).
        seqs: the step's sequences, in the order of `step` (their tokens now include what the
            step emitted; a finished one has status FINISHED and no blocks).
        hidden: `[len(step.token_ids), hidden]` the target's final hidden states, when the
            proposer asked for them (`Proposer.needs_hidden`), else None.
    """

    step: StepInput
    seqs: list[Sequence]
    hidden: torch.Tensor | None = None


class Proposer(Protocol):
    """Proposes draft tokens."""

    needs_hidden: bool
    """Whether `StepView.hidden` must be filled (the MTP layer reads the target's states)."""

    def propose(self, view: StepView, wanted: dict[int, int]) -> dict[int, list[int]]:
        """Drafts for `wanted` (index into `view.seqs` -> at most this many tokens, >= 1).

        Called after every step, also with nothing wanted (a proposer with a KV cache of its
        own follows the target's steps).

        Returns:
            Index -> draft tokens (missing or empty: no draft).
        """


def may_speculate(seq: Sequence) -> bool:
    """Whether `seq` can ever get a draft: no grammar, and speculation not turned off."""
    return seq.params.constraint is None and (seq.spec is None or seq.spec.enabled)


class Speculator:
    """The engine's speculative decoding.

    Args:
        config: the model's `speculative` settings.
        max_model_len: context length in tokens (a draft never reaches past it).
        proposer: where drafts come from (`config.method`'s).
    """

    def __init__(self, config: SpeculativeConfig, max_model_len: int, proposer: Proposer) -> None:
        self.config = config
        self.k = config.num_speculative_tokens
        self.max_model_len = max_model_len
        self.proposer = proposer
        self._drafts = self._draft_tokens = self._accepted = 0
        self._per_pos = [0] * self.k

    @property
    def needs_hidden(self) -> bool:
        """Whether the engine must pass the target's hidden states (`StepView.hidden`)."""
        return self.proposer.needs_hidden

    def _room(self, seq: Sequence) -> int:
        """Draft tokens `seq` may get next (0: none)."""
        if not may_speculate(seq):
            return 0
        if seq.spec is None:
            seq.spec = SpecState()
        left = min(
            seq.params.max_tokens - len(seq.output_token_ids), self.max_model_len - seq.num_tokens
        )
        return max(0, min(self.k, left - 1))  # the step emits up to k + 1 tokens

    def after_step(self, view: StepView, sampled: list[int]) -> None:
        """Set `draft_token_ids` of the sequences `sampled` (indices into `view.seqs` of the
        running sequences that got tokens in the step) for their next step."""
        wanted = {}
        for i in sampled:
            seq = view.seqs[i]
            seq.draft_token_ids = []
            if (k := self._room(seq)) > 0:
                wanted[i] = k
        for i, draft in self.proposer.propose(view, wanted).items():
            assert len(draft) <= wanted[i], f"{len(draft)} draft tokens for {wanted[i]}"
            view.seqs[i].draft_token_ids = draft

    def follow_step(
        self, step: StepInput, batch: SchedulerOutput, hidden: torch.Tensor | None
    ) -> None:
        """After a step's outputs: let the proposer follow the step (`after_step`) and draft
        for the sequences that sampled in it and go on.

        Args:
            step: what the target ran (`return_hidden` set when `needs_hidden`).
            batch: the step's schedule.
            hidden: the target's hidden states of the step, when `needs_hidden`.
        """
        going = [
            i
            for i, s in enumerate(batch.scheduled)
            if s.sample and s.seq.status is not SequenceStatus.FINISHED
        ]
        self.after_step(StepView(step, [s.seq for s in batch.scheduled], hidden), going)

    def verify(self, s: ScheduledSeq, logits: torch.Tensor) -> Verified:
        """Keep the part of `s`'s draft the target agrees with (`engine.spec_decode.rejection`)
        and count it (`record`).

        Args:
            logits: `[1 + len(s.draft_token_ids), vocab]` the target's logits at the rows of
                `s`'s last known token and its draft tokens.

        Raises:
            Exception: whatever this request's own processing raised (its grammar, say); the
                engine ends that request alone.
        """
        draft = list(s.draft_token_ids)
        verified = verify(logits, s.seq, draft)
        self.record(s.seq, len(draft), verified.num_accepted)
        return verified

    def record(self, seq: Sequence, num_drafted: int, num_accepted: int) -> None:
        """Count one verified draft of `num_drafted` tokens, `num_accepted` of them kept, and
        update the sequence's acceptance average."""
        assert 0 <= num_accepted <= num_drafted <= self.k, (
            f"{num_accepted} of {num_drafted} draft tokens kept, k = {self.k}"
        )
        self._drafts += 1
        self._draft_tokens += num_drafted
        self._accepted += num_accepted
        for pos in range(num_accepted):
            self._per_pos[pos] += 1
        assert seq.spec is not None, f"request {seq.request_id} verified a draft it never got"
        seq.spec.record(num_drafted, num_accepted, self.config.min_acceptance_rate)

    def stats(self) -> SpecDecodeStats:
        """The counters now."""
        return SpecDecodeStats(
            self._drafts, self._draft_tokens, self._accepted, tuple(self._per_pos)
        )
