"""A fault-injecting engine for tests: the real `LLMEngine`, plus faults a request asks for.

Selected by a model deployment's `engine_class: tests.faulty_engine:FaultyEngine` (the replica
imports it from the repository root, Ray's working directory for the test session). A request
chooses its fault by its `seed`:

- `STEP_FAULT`: the engine step that carries it raises (as a failing forward pass would): every
  request of that step ends with `error_kind="step"`, and the engine goes on.
- `REQUEST_FAULT`: its own grammar constraint raises in the sampler: that request alone ends
  (`error_kind="request"`), the rest of the batch completes.
- `LOOP_FAULT`: the engine loop itself dies at its next step (an error outside the step's own
  handling): every waiting request must end at once, and the replica must report unhealthy.
- `STALL_FAULT`: once it has its first token, every step that carries it takes `STALL_S`
  seconds longer (a stalled stream): the router's inter-token timeout must end it.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from engine.llm_engine import LLMEngine
from engine.multimodal.inputs import MediaItem
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams
from engine.scheduler import SchedulerOutput

STEP_FAULT = 911_001
REQUEST_FAULT = 911_002
LOOP_FAULT = 911_003
STALL_FAULT = 911_004
STALL_S = 12.0


class InjectedFault(RuntimeError):
    """The fault a test asked for."""


class _BrokenGrammar:
    """A `TokenConstraint` whose mask raises."""

    def mask_logits(self, logits: torch.Tensor) -> None:
        raise InjectedFault("injected grammar fault")

    def accept(self, token_id: int) -> None:
        raise InjectedFault("injected grammar fault")

    def is_terminated(self) -> bool:
        return False


class FaultyEngine(LLMEngine):
    """`LLMEngine` with the faults above (same constructor)."""

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        media: tuple[MediaItem, ...] = (),
    ) -> None:
        """See `LLMEngine.add_request`; a `REQUEST_FAULT` request gets a broken grammar."""
        if params.seed == REQUEST_FAULT:
            params = replace(params, constraint=_BrokenGrammar())
        super().add_request(request_id, prompt_token_ids, params, media)

    def step(self) -> list[RequestOutput]:
        """See `LLMEngine.step`; a `LOOP_FAULT` request kills the loop."""
        seqs = self._seqs.values()
        if any(s.params.seed == LOOP_FAULT for s in seqs):
            raise InjectedFault("injected engine-loop fault")
        if any(s.params.seed == STALL_FAULT and s.output_token_ids for s in seqs):
            time.sleep(STALL_S)
        return super().step()

    def _run(self, batch: SchedulerOutput) -> list[RequestOutput]:
        if any(s.seq.params.seed == STEP_FAULT for s in batch.scheduled):
            raise InjectedFault("injected step fault")
        return super()._run(batch)
