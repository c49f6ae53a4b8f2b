"""One pipeline stage's part of a step: the batch as micro-batches, hidden states stage to stage.

Every rank receives the whole `StepInput` and splits it the same way into micro-batches of
whole sequences (`split_micro_batches`: as many as stages, of about equal token counts). Stage
`s` runs micro-batch `i`, sends its `[T_i, hidden]` hidden states to the rank of the same
tensor-parallel index in stage `s + 1` without waiting for delivery (`torch.distributed.isend`,
gloo here, HCCL on Ascend), and goes on with micro-batch `i + 1` while stage `s + 1` works on
`i`: the stages overlap as in GPipe's forward pass (Huang et al., 2019) and vLLM's pipeline of
virtual engines, one per stage. The last stage computes each micro-batch's logits and puts them
back in the step's row order, so the result is the one step of one rank.

Splitting by whole sequences leaves every token's computation unchanged: its attention reads
only its own sequence's cache, and the layers' kernels do not depend on the neighbours
(`engine.forward_context`), so outputs equal those of one stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from engine.model_runner import ModelRunner
from engine.parallel.stage_layers import StageLayers
from engine.step_input import StepInput
from engine.step_result import StepResult


@dataclass(frozen=True)
class MicroBatch:
    """A contiguous run of a step's sequences.

    Attributes:
        step: the sequences' own step (rows renumbered into its token batch).
        rows: positions in the whole step's `rows` of this micro-batch's `step.rows`, in order.
    """

    step: StepInput
    rows: list[int]


def split_micro_batches(step: StepInput, count: int) -> list[MicroBatch]:
    """Split `step` into at most `count` micro-batches of consecutive whole sequences, of about
    equal token counts (fewer when the step has fewer sequences).

    Raises:
        ValueError: the step returns hidden states or has LoRA or hybrid-cache fields (not run
            under pipeline parallel).
    """
    if step.return_hidden or step.lora_ids or step.sliding_tables:
        raise ValueError("pipeline parallel runs steps without hidden states, LoRA or hybrid KV")
    total, seqs = len(step.token_ids), len(step.q_lens)
    count = max(1, min(count, seqs))
    # sequence boundaries nearest to every count-th share of the tokens
    ends = [0]
    for part in range(1, count):
        target, done = total * part // count, ends[-1]
        cut = ends[-1] + 1
        while cut < seqs - (count - part) and done + step.q_lens[cut - 1] < target:
            done += step.q_lens[cut - 1]
            cut += 1
        ends.append(cut)
    ends.append(seqs)
    batches = []
    for lo, hi in zip(ends, ends[1:], strict=False):
        first, last = sum(step.q_lens[:lo]), sum(step.q_lens[:hi])
        positions = [i for i, r in enumerate(step.rows) if first <= r < last]
        sub = StepInput(
            token_ids=step.token_ids[first:last],
            starts=step.starts[lo:hi],
            q_lens=step.q_lens[lo:hi],
            block_tables=step.block_tables[lo:hi],
            rows=[step.rows[i] - first for i in positions],
            prompt_lens=step.prompt_lens[lo:hi],
        )
        batches.append(MicroBatch(sub, positions))
    return batches


class PipelineStage:
    """Runs one rank's stage of every step.

    Args:
        runner: the stage's model runner (`ModelRunner.execute_stage`).
        stage: which layers this stage holds.
        previous_rank: the global rank this one receives hidden states from (None: first).
        next_rank: the global rank this one sends hidden states to (None: last).
        hidden_size: the model's hidden size.
        dtype: the hidden states' dtype (the model's).
        device: where the runner's model lives.
    """

    def __init__(
        self,
        runner: ModelRunner,
        stage: StageLayers,
        previous_rank: int | None,
        next_rank: int | None,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.runner = runner
        self.stage = stage
        self.previous_rank = previous_rank
        self.next_rank = next_rank
        self.hidden_size = hidden_size
        self.dtype = dtype
        self.device = device

    def execute(self, step: StepInput) -> StepResult | None:
        """Run the stage on every micro-batch of `step`, in order.

        Returns:
            On the last stage the step's `[len(step.rows), vocab_size]` float32 logits in the
            step's row order; None on the others.
        """
        batches = split_micro_batches(step, self.stage.stages)
        sends: list[dist.Work] = []
        logits: torch.Tensor | None = None
        for batch in batches:
            hidden = None
            if self.previous_rank is not None:
                shape = (len(batch.step.token_ids), self.hidden_size)
                hidden = torch.empty(shape, dtype=self.dtype, device=self.device)
                dist.recv(hidden, src=self.previous_rank)
            out = self.runner.execute_stage(batch.step, hidden, last=self.next_rank is None)
            if self.next_rank is not None:
                work = dist.isend(out.contiguous(), dst=self.next_rank)
                assert work is not None, "isend to a rank of this group returns its work"
                sends.append(work)
                continue
            if logits is None:
                logits = out.new_empty(len(step.rows), out.shape[-1])
            logits[batch.rows] = out
        for work in sends:  # the buffers stay alive until delivered
            work.wait()
        if logits is None:
            return None
        return StepResult(logits)
