"""What the executor hands back for one step (`Executor.execute`), the other half of
`engine.step_input.StepInput`."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepResult:
    """The model's output for one step.

    Attributes:
        logits: `[len(step.rows), vocab_size]` float32, row i for `step.rows[i]`.
        hidden: `[len(step.token_ids), hidden_size]` every token's final hidden state (after the
            final norm, in the model's dtype) when the step asked for them
            (`StepInput.return_hidden`: an MTP drafter reads them), else None.
    """

    logits: torch.Tensor
    hidden: torch.Tensor | None = None

    def cpu(self) -> StepResult:
        """This result with its tensors moved to the CPU (a tensor-parallel rank's answer)."""
        hidden = None if self.hidden is None else self.hidden.cpu()
        return StepResult(self.logits.cpu(), hidden)
