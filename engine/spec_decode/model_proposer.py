"""Drafts from a model: a small draft model (`method: draft`) or the MTP layer (`method: mtp`).

The drafting model has a KV cache of its own (`ModelRunner` over its own per-layer caches) with
as many blocks as the target's, addressed through the target's block tables: a sequence's
draft KV for position p sits in the same block and slot as its target KV. So the target's
allocation, prefix cache, preemption and rollback govern both, with nothing to track per
sequence: the KV at a position is valid wherever the target's is, because after every step
the drafting model runs on the positions the target computed in it (`_follow`):

- draft model: position p holds token `t_p`, as in the target;
- MTP: position p holds the target's hidden state `h_p` and the next token `t_{p+1}`
  (`engine.spec_decode.mtp_model`), so only positions whose next token is known are run.

For sequences that want a draft, that pass also reaches the newest token and its last row
gives the first draft token; then k - 1 one-token passes continue greedily from it (the MTP
layer fed its own output state, as vLLM and transformers chain it). Their KV at positions past
the target's lies beyond the sequence's computed tokens and is overwritten when the target
gets there. Drafts are greedy, i.e. a point mass, which is what the verification assumes
(`engine.spec_decode.rejection`): the emitted tokens follow the target's distribution whatever
the draft.

Sequences that cannot speculate (a grammar, speculation turned off) are not followed, to save
the drafting model's cost; if a later request's prefix-cache hit covers blocks such a
sequence computed, the drafting KV there is stale, which lowers that request's acceptance and
never changes its output. The same holds for the positions a finishing sequence computed in
its last step.

A hybrid drafter (DeepSeek-V4's MTP layer, `engine.spec_decode.mtp_v4`) keeps its sliding-window
KV in the target's sliding blocks: every step of it carries the sequences' sliding tables.
It follows a step after the target's `HybridBlockManager.commit` released the sliding blocks
behind the target's span, which covers every position the drafter will read again
(`engine.spec_decode.build.fit_hybrid_drafter`); the follow pass starts at the first position
whose block is still held. Its sliding-window K=V at a position depends on that position's
input alone, so nothing read later is lost; rows it skips in a long prefill chunk would only
have given discarded outputs. A prefix hit may restore such a skipped block, whose drafting KV
is then stale (acceptance only, as above).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch

from engine.block_manager import BlockManager
from engine.model_runner import ModelRunner
from engine.sequence import Sequence, SequenceStatus
from engine.spec_decode.speculator import StepView, may_speculate
from engine.step_input import StepInput


@dataclass
class _Drafting:
    """One wanting sequence's draft in progress."""

    index: int
    k: int
    next_position: int
    tokens: list[int]


class ModelProposer:
    """Greedy drafts from `runner`'s model, which follows the target's steps.

    Args:
        runner: the drafting model on its own KV cache (same block count and size as the
            target's).
        block_manager: the target's; drafts need the slots of the positions they write.
        mtp: the model is an MTP layer (`engine.spec_decode.mtp_model.MtpDraftModel`,
            `engine.spec_decode.mtp_v4_draft.V4MtpDraftModel`): row p takes token `t_{p+1}` and the
            target's hidden state `h_p`; else a draft model. A model with a `conditioning`
            method maps the target's final hidden states to what it takes instead (V4: the
            hidden streams before `hc_head`).
        hybrid: the model's cache is hybrid, on the target's sliding-window blocks (the
            target's block manager is a `HybridBlockManager`).
    """

    def __init__(
        self, runner: ModelRunner, block_manager: BlockManager, mtp: bool, hybrid: bool = False
    ) -> None:
        self.runner = runner
        self.block_manager = block_manager
        self.shift = 1 if mtp else 0
        self.needs_hidden = mtp
        self.hybrid = hybrid
        self.conditioning = getattr(runner.model, "conditioning", None)

    @torch.inference_mode()
    def propose(self, view: StepView, wanted: dict[int, int]) -> dict[int, list[int]]:
        """See `engine.spec_decode.speculator.Proposer`."""
        drafting, logits, last_rows = self._follow(view, wanted)
        if not drafting:
            return {}
        for d, token in zip(drafting, logits.argmax(dim=-1).tolist()):
            d.tokens.append(token)
        for r in range(1, max(d.k for d in drafting)):
            going = [j for j, d in enumerate(drafting) if d.k > r]
            step = StepInput(
                token_ids=[drafting[j].tokens[-1] for j in going],
                starts=[drafting[j].next_position for j in going],
                q_lens=[1] * len(going),
                block_tables=[list(view.seqs[drafting[j].index].block_table) for j in going],
                rows=list(range(len(going))),
                prompt_lens=[view.seqs[drafting[j].index].num_prompt_tokens for j in going],
                sliding_tables=self._sliding([view.seqs[drafting[j].index] for j in going]),
            )
            previous = last_rows[going] if self.needs_hidden else None
            logits, out = self.runner.execute_hidden(step, previous)
            for j, token in zip(going, logits.argmax(dim=-1).tolist()):
                drafting[j].tokens.append(token)
                drafting[j].next_position += 1
            last_rows[going] = out
        return {d.index: d.tokens for d in drafting}

    def _follow(
        self, view: StepView, wanted: dict[int, int]
    ) -> tuple[list[_Drafting], torch.Tensor, torch.Tensor]:
        """Run the drafting model on the step's positions (to the newest token for wanting
        sequences that got the blocks their draft writes into).

        Returns:
            The drafts begun, `[len(drafts), vocab]` logits of their first token and
            `[len(drafts), hidden]` the output states of the rows that gave them.
        """
        step, shift = view.step, self.shift
        hidden = view.hidden
        if self.needs_hidden and self.conditioning is not None:
            assert hidden is not None, "the engine passes the target's hidden states"
            hidden = self.conditioning(hidden)
        first_rows = [0]
        for q in step.q_lens:
            first_rows.append(first_rows[-1] + q)
        tokens: list[int] = []
        starts, q_lens, tables, prompt_lens, rows, previous = [], [], [], [], [], []
        followed = []
        drafting: list[_Drafting] = []
        for i, seq in enumerate(view.seqs):
            if seq.status is SequenceStatus.FINISHED or not may_speculate(seq):
                continue
            start, n = step.starts[i], seq.num_tokens
            end = min(start + step.q_lens[i], n - shift)
            k = wanted.get(i, 0)
            # the draft writes positions end .. end + k - 2 past the newest one's (n - shift - 1)
            if k and self.block_manager.ensure_capacity(seq, n - shift + k - 1):
                end = n - shift
            else:
                k = 0
            first = max(start, self._first_held(seq)) if self.hybrid else start
            if end <= first:
                continue
            tokens += seq.token_ids()[first + shift : end + shift]
            starts.append(first)
            q_lens.append(end - first)
            tables.append(list(seq.block_table))
            prompt_lens.append(seq.num_prompt_tokens)
            followed.append(seq)
            if hidden is not None:
                row = first_rows[i] + first - start
                previous.append(hidden[row : row + end - first])
            if k:
                rows.append(len(tokens) - 1)
                drafting.append(_Drafting(i, k, end, []))
        if not tokens:
            return [], torch.empty(0), torch.empty(0)
        follow = StepInput(
            tokens,
            starts,
            q_lens,
            tables,
            rows,
            prompt_lens,
            sliding_tables=self._sliding(followed),
        )
        conditioning = torch.cat(previous) if self.needs_hidden else None
        logits, out = self.runner.execute_hidden(follow, conditioning)
        return drafting, logits, out[rows]

    def _first_held(self, seq: Sequence) -> int:
        """The first position whose sliding block `seq` still holds (hybrid drafters): the
        released blocks (-1) are a prefix of its sliding table."""
        held = bisect.bisect_left(seq.sliding_table, True, key=lambda block: block >= 0)
        return held * self.block_manager.block_size

    def _sliding(self, seqs: list[Sequence]) -> tuple[tuple[int, ...], ...]:
        """The sliding tables of a hybrid drafter's step (empty for other drafters)."""
        return tuple(tuple(s.sliding_table) for s in seqs) if self.hybrid else ()
