"""Prompt logprobs (`SamplingParams.prompt_logprobs`): the step's part of a request asking for
them.

Each prefill chunk of such a request gets a logits row at every prompt position `p` below
`num_prompt - 1` (that row predicts prompt token `p + 1`). `PromptLogprobRows.of` lays the rows
out first in `StepInput.rows`, before the sampling rows; after the step, `collect` keeps their
entries on the sequence (`Sequence.prompt_logprobs`), and `take_prompt_logprobs` sends them
once, with the request's first output that carries a token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.outputs import TokenLogprob
from engine.sampler import prompt_logprobs
from engine.scheduler import ScheduledSeq, SchedulerOutput
from engine.sequence import Sequence


@dataclass(frozen=True)
class PromptLogprobRows:
    """The prompt-logprob rows of one step.

    Attributes:
        rows: indices into the flattened batch, for `StepInput.rows` (ahead of sampling rows).
        spans: per sequence with rows in this step, `(its share of the step, index of its first
            row in rows, its number of rows)`.
    """

    rows: tuple[int, ...]
    spans: tuple[tuple[ScheduledSeq, int, int], ...]

    @classmethod
    def of(cls, batch: SchedulerOutput) -> PromptLogprobRows:
        """The rows of the sequences of `batch` that asked for prompt logprobs and have not had
        them sent yet."""
        rows: list[int] = []
        spans: list[tuple[ScheduledSeq, int, int]] = []
        offset = 0
        for s in batch.scheduled:
            seq = s.seq
            if seq.params.prompt_logprobs is not None and not seq.prompt_logprobs_sent:
                stop = min(seq.num_computed_tokens + s.num_new_tokens, seq.num_prompt_tokens - 1)
                n = max(0, stop - seq.num_computed_tokens)
                spans.append((s, len(rows), n))
                rows.extend(range(offset, offset + n))
            offset += s.num_new_tokens
        return cls(tuple(rows), tuple(spans))

    def collect(self, logits: torch.Tensor) -> torch.Tensor:
        """Keep the entries of these rows on their sequences.

        Args:
            logits: `[len(step.rows), vocab]` the step's logits, these rows first.

        Returns:
            The rest of `logits`: the sampling rows.
        """
        for s, first, n in self.spans:
            seq, num_top = s.seq, s.seq.params.prompt_logprobs
            assert num_top is not None, "a span of a sequence asking for prompt logprobs"
            start = seq.num_computed_tokens
            nxt = seq.prompt_token_ids[start + 1 : start + 1 + n]
            entries = prompt_logprobs(logits[first : first + n], nxt, num_top)
            # after a preemption the prompt is recomputed: keep only positions not yet seen
            seq.prompt_logprobs.extend(entries[len(seq.prompt_logprobs) - start :])
        return logits[len(self.rows) :]


def take_prompt_logprobs(seq: Sequence) -> tuple[TokenLogprob, ...] | None:
    """The prompt logprobs to send with an output of `seq` that carries tokens: every prompt
    position's entry (the first token's has no logprob), the first time; None after that or
    when the request did not ask."""
    if seq.params.prompt_logprobs is None or seq.prompt_logprobs_sent:
        return None
    seq.prompt_logprobs_sent = True
    return (TokenLogprob(seq.prompt_token_ids[0], None, ()), *seq.prompt_logprobs)
