"""Proposes each sequence's draft tokens and keeps the acceptance counters.

The engine calls `propose` after every token it samples for a sequence that goes on, and
`record` after verifying a draft. A sequence gets no draft when it has a grammar constraint
(constrained decoding runs without speculation: the grammar would have to accept the draft
tokens before they are verified and roll back the rejected ones), when it has turned
speculation off (its acceptance average fell below `min_acceptance_rate`, see
`engine.spec_decode.state`), when the n-gram finds no earlier match, or when it has room for
no more than one more token (`max_tokens`, context length): a draft never makes a step emit
more tokens than the request may still have.
"""

from __future__ import annotations

from dataclasses import dataclass

from configs.speculative_config import SpeculativeConfig
from engine.sequence import Sequence
from engine.spec_decode.ngram import propose_ngram
from engine.spec_decode.state import SpecState


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


class NgramSpeculator:
    """Prompt-lookup drafts for the engine's sequences.

    Args:
        config: the model's `speculative` settings (`method: ngram`).
        max_model_len: context length in tokens (a draft never reaches past it).
    """

    def __init__(self, config: SpeculativeConfig, max_model_len: int) -> None:
        self.config = config
        self.k = config.num_speculative_tokens
        self.max_model_len = max_model_len
        self._drafts = self._draft_tokens = self._accepted = 0
        self._per_pos = [0] * self.k

    def propose(self, seq: Sequence) -> None:
        """Set `seq.draft_token_ids` for its next step (empty: a plain decode step)."""
        seq.draft_token_ids = []
        if seq.params.constraint is not None:
            return
        state = seq.spec
        if state is None:
            state = seq.spec = SpecState()
        if not state.enabled:
            return
        left = min(
            seq.params.max_tokens - len(seq.output_token_ids), self.max_model_len - seq.num_tokens
        )
        k = min(self.k, left - 1)  # the step emits up to k + 1 tokens
        if k <= 0:
            return
        tokens = state.mirror(seq.token_ids())
        cfg = self.config
        seq.draft_token_ids = propose_ngram(tokens, cfg.prompt_lookup_min, cfg.prompt_lookup_max, k)

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
