"""Batch sizing against a latency target (`engine.slo`): an AIMD loop over the admission limits.

The engine reports every step (`StepSample`); the controller keeps the wall times of the last
`window_steps` decode steps taken under the current limits (a step that decodes is what every
running sequence waits for its next token: its TPOT) and the TTFTs (queued -> first token) of
the last `window_steps` requests that got a first token. Once the TPOT window is full it decides,
on the nearest-rank p90 of each window:

- `max_num_seqs`: it starts at `min_num_seqs` (slow start: a batch admitted at the configured
  limit before any step was measured would run over the target until it drains, as running
  sequences are never preempted); over `tpot_ms` -> `min(limit, most running in the window) x
  decrease_factor` (at least one less, at least `min_num_seqs`); under `increase_margin x
  tpot_ms` while requests wait and the limit was reached in the window -> x 2 until the first
  cut, + 1 after it, up to the configured value.
- `max_num_batched_tokens`: TTFT over `ttft_ms` while requests wait -> + 1/16 of the configured
  value (a larger prefill chunk admits and prefills faster); else over `tpot_ms` ->
  `min(limit, largest step in the window) x decrease_factor` (smaller prefill chunks beside the
  decodes); else under the margin while requests wait -> + 1/16. Never under
  `min(max_num_seqs, max_num_batched_tokens)` as configured, so every running sequence still
  gets its decode token when a lowered `max_num_seqs` has not drained yet.

A change empties the TPOT window: the next decision waits for `window_steps` decode steps at the
new limits. Steps that ran more sequences than the current `max_num_seqs` (a lowered limit that
has not drained: running sequences are never preempted by it, only admission stops) do not
count, so the loop does not cut again for a batch it has already cut. This is multiplicative
decrease / additive increase as in TCP congestion control (Chiu & Jain, "Analysis of the
Increase and Decrease Algorithms for Congestion Avoidance", 1989), applied as MindIE's
TPOT-aware dynamic batch size adjusts `maxBatchSize` (hiascend.com MindIE LLM "SLO Scheduling
Optimization") and vLLM-Ascend's dynamic batch sizes its prefill chunk per step
(docs.vllm.ai/projects/ascend, feature guide "Dynamic Batch"). Only admission changes: a
request's tokens are the same with or without it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from configs.slo_config import SloConfig

TOKEN_STEPS = 16
"""Additive increase of the token budget: 1/16 of its configured value per decision."""


@dataclass(frozen=True)
class BatchLimits:
    """The scheduler's admission limits for the next steps.

    Attributes:
        max_num_seqs: sequences admitted to the running batch at most.
        max_num_batched_tokens: tokens per step at most (prefill chunks plus decodes).
    """

    max_num_seqs: int
    max_num_batched_tokens: int


@dataclass(frozen=True)
class StepSample:
    """What one engine step tells the controller.

    Attributes:
        duration_s: the step's wall time (schedule, forward pass, sampling), seconds.
        num_running: sequences in the step's batch.
        num_tokens: tokens in the step's batch.
        decoded: whether any sequence sampled a token after its prompt (a decode step).
        num_waiting: sequences left waiting after the step.
    """

    duration_s: float
    num_running: int
    num_tokens: int
    decoded: bool
    num_waiting: int


@dataclass(frozen=True)
class SloState:
    """The controller's figures, for metrics and the health reply.

    Attributes:
        tpot_p90_s: p90 of the TPOT window at the last decision, seconds; None before it.
        ttft_p90_s: p90 of the TTFT window, seconds; None before a first token.
        num_decreases: decisions that lowered a limit.
        num_increases: decisions that raised a limit.
    """

    tpot_p90_s: float | None
    ttft_p90_s: float | None
    num_decreases: int
    num_increases: int


def p90(values: list[float]) -> float:
    """The nearest-rank 90th percentile: the ceil(0.9 n)-th smallest of `values` (non-empty)."""
    assert values, "p90 of no values"
    return sorted(values)[math.ceil(0.9 * len(values)) - 1]


class SloController:
    """Adapts `BatchLimits` to the targets of `config` (module docstring). `config` is read at
    every decision, so a retuned one (same `window_steps`) may replace it between steps.

    Args:
        config: the targets and step sizes.
        ceiling: the configured limits (`engine.max_num_seqs`, `engine.max_num_batched_tokens`),
            which the limits never exceed; the token budget starts there.
        start_num_seqs: where `max_num_seqs` starts; default `config.min_num_seqs` (slow
            start).

    Raises:
        ValueError: `config.min_num_seqs` is over `ceiling.max_num_seqs`.
    """

    def __init__(
        self, config: SloConfig, ceiling: BatchLimits, start_num_seqs: int | None = None
    ) -> None:
        if config.min_num_seqs > ceiling.max_num_seqs:
            raise ValueError(
                f"slo.min_num_seqs {config.min_num_seqs} is over max_num_seqs "
                f"{ceiling.max_num_seqs}: lower it or raise max_num_seqs"
            )
        self.config = config
        self.ceiling = ceiling
        self.floor = BatchLimits(
            config.min_num_seqs, min(ceiling.max_num_seqs, ceiling.max_num_batched_tokens)
        )
        start = config.min_num_seqs if start_num_seqs is None else start_num_seqs
        self.limits = BatchLimits(start, ceiling.max_num_batched_tokens)
        self._slow_start = True
        self._token_step = max(1, ceiling.max_num_batched_tokens // TOKEN_STEPS)
        self._steps: deque[StepSample] = deque(maxlen=config.window_steps)
        self._ttft: deque[float] = deque(maxlen=config.window_steps)
        self._queued: dict[str, float] = {}
        self._tpot_p90: float | None = None
        self._decreases = 0
        self._increases = 0

    def queued(self, request_id: str, now: float) -> None:
        """A request entered the waiting queue at `now` (monotonic seconds)."""
        self._queued[request_id] = now

    def first_token(self, request_id: str, now: float) -> None:
        """The step that ended at `now` gave `request_id` its first token: a TTFT sample."""
        queued = self._queued.pop(request_id, None)
        if queued is not None:
            self._ttft.append(now - queued)

    def forget(self, request_id: str) -> None:
        """A request ended (finished, aborted) before or after its first token."""
        self._queued.pop(request_id, None)

    def state(self) -> SloState:
        """The current p90s and decision counts."""
        ttft = p90(list(self._ttft)) if self._ttft else None
        return SloState(self._tpot_p90, ttft, self._decreases, self._increases)

    def observe(self, step: StepSample) -> BatchLimits:
        """Take one step's figures; the limits for the next step (changed at most once per
        full window)."""
        if step.decoded and step.num_running <= self.limits.max_num_seqs:
            self._steps.append(step)
        if len(self._steps) == self._steps.maxlen:
            self._decide(step.num_waiting > 0)
        return self.limits

    def _decide(self, queue: bool) -> None:
        cfg, steps = self.config, self._steps
        tpot = self._tpot_p90 = p90([s.duration_s for s in steps])
        ttft = self.state().ttft_p90_s
        over = cfg.tpot_ms is not None and tpot * 1e3 > cfg.tpot_ms
        room = cfg.tpot_ms is None or tpot * 1e3 < cfg.tpot_ms * cfg.increase_margin
        late = cfg.ttft_ms is not None and ttft is not None and ttft * 1e3 > cfg.ttft_ms
        seqs, tokens = self.limits.max_num_seqs, self.limits.max_num_batched_tokens
        used_seqs = max(s.num_running for s in steps)
        used_tokens = max(s.num_tokens for s in steps)
        if over:
            seqs = self._cut(min(seqs, used_seqs), self.floor.max_num_seqs)
            self._slow_start = False
        elif room and queue and used_seqs >= seqs:
            seqs = min(self.ceiling.max_num_seqs, 2 * seqs if self._slow_start else seqs + 1)
        if late and queue:
            tokens = min(self.ceiling.max_num_batched_tokens, tokens + self._token_step)
        elif over:
            tokens = self._cut(min(tokens, used_tokens), self.floor.max_num_batched_tokens)
        elif room and queue:
            tokens = min(self.ceiling.max_num_batched_tokens, tokens + self._token_step)
        new = BatchLimits(seqs, tokens)
        if new == self.limits:
            return
        old = self.limits
        if seqs < old.max_num_seqs or tokens < old.max_num_batched_tokens:
            self._decreases += 1
        if seqs > old.max_num_seqs or tokens > old.max_num_batched_tokens:
            self._increases += 1
        self.limits = new
        steps.clear()

    def _cut(self, used: int, floor: int) -> int:
        """`used` x `decrease_factor`, at least one less, never under `floor`."""
        return max(floor, min(used - 1, int(used * self.config.decrease_factor)))
