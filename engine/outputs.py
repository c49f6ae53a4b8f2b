"""What the engine hands back after each step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ErrorKind = Literal["request", "step", "dead"]


@dataclass(frozen=True)
class TokenLogprob:
    """Log-probability of one chosen token plus the top alternatives.

    Attributes:
        token_id: the chosen (or prompt) token.
        logprob: its natural-log probability under the model's distribution, or None for the
            first prompt token (nothing precedes it).
        top: (token_id, logprob) pairs of the most likely tokens, most likely first.
    """

    token_id: int
    logprob: float | None
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class RequestOutput:
    """New tokens for one request from one engine step.

    Attributes:
        request_id: the id given to `add_request`.
        new_token_ids: tokens generated in this step (usually one).
        logprobs: one entry per new token when logprobs were asked for.
        prompt_logprobs: one entry per prompt token, sent once with the first token.
        finished: True on the request's last output.
        finish_reason: `stop`, `length` or `abort` when finished; None otherwise.
        num_prompt_tokens: prompt length in tokens.
        num_output_tokens: tokens generated so far, this step included.
        error: set when the request failed inside the engine (finish_reason is `error`).
        error_kind: what failed, with `error`: `request` (something of this request alone, e.g.
            its grammar or logit bias, failed in a step; the batch went on), `step` (the step
            that carried it failed as a whole, e.g. the forward pass) or `dead` (the engine
            loop ended).
        scheduled_at: when the scheduler first ran the request (`time.monotonic()` seconds;
            None if it never ran), for the queue and prefill times of the engine metrics.
        num_cached_tokens: prompt tokens whose KV came from the prefix cache (OpenAI's
            `usage.prompt_tokens_details.cached_tokens`).
        step_started_at: when the engine step that produced the output began (before
            scheduling), `time.monotonic()` seconds; None for outputs no step produced (the
            engine shutting down or dying). Read by the per-token timing
            (`deployments.streaming.token_timing`).
        step_ended_at: when the output was built, its step's forward pass and sampling done
            (`time.monotonic()` seconds; None as for `step_started_at`).
    """

    request_id: str
    new_token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    logprobs: tuple[TokenLogprob, ...] | None = None
    prompt_logprobs: tuple[TokenLogprob, ...] | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    scheduled_at: float | None = None
    num_cached_tokens: int = 0
    step_started_at: float | None = None
    step_ended_at: float | None = None
