"""Per-request timing for the engine metrics, as vLLM defines it (`vllm/v1/metrics/stats.py`).

Every time is `time.monotonic()` seconds. The engine front (`engine.async_engine`) stamps a
request's arrival (the caller's `add`), when the engine queued it, and, from the engine thread,
the end of each step that gave it a token; the engine reports when its scheduler first ran the
request (`RequestOutput.scheduled_at`). A finished request's intervals follow:

- queue: queued -> first scheduled;
- prefill: first scheduled -> first token (preemptions during prefill included);
- decode: first token -> last token;
- inference: first scheduled -> last token;
- e2e: arrival -> the step that finished it;
- mean time per output token: decode / (generated tokens - 1).

Only the engine thread touches these objects once the request is queued.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.outputs import RequestOutput


@dataclass(eq=False)
class SampleGroup:
    """The engine requests that sample one prompt `size` times (OpenAI `n`; vLLM's parent
    request): `vllm:request_max_num_generation_tokens` counts the group once, with the most
    tokens any member generated.

    Args:
        size: members in the group (>= 1).
    """

    size: int
    _ended: int = 0
    _max_generation_tokens: int = 0

    def end_member(self, num_generation_tokens: int) -> int | None:
        """Record one member's end; once the last member has ended, the most tokens any member
        generated, else None. A member aborted by its caller never ends, so neither does its
        group (vLLM does not count aborted requests either)."""
        self._ended += 1
        self._max_generation_tokens = max(self._max_generation_tokens, num_generation_tokens)
        return self._max_generation_tokens if self._ended == self.size else None


@dataclass(eq=False)
class RequestTimes:
    """The timestamps of one engine request (monotonic seconds).

    Attributes:
        arrival: when the caller asked to add it.
        group: its sample group; None for a request sampled once.
        queued: when the engine took it (0 until then).
        scheduled: when the engine's scheduler first ran it (from its first token's output).
        first_token: the end of the step that gave its first token; None before that.
        last_token: the end of the step that gave its latest token.
    """

    arrival: float
    group: SampleGroup | None = None
    queued: float = 0.0
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float = 0.0

    def record_tokens(self, scheduled_at: float | None, now: float) -> float | None:
        """Record a step, ended at `now`, that gave this request tokens; the gap since its
        previous token, or None for its first (then `scheduled_at`, when the scheduler first
        ran it, is kept as well)."""
        previous, self.last_token = self.last_token, now
        if self.first_token is None:
            self.first_token, self.scheduled = now, scheduled_at
            return None
        return now - previous


@dataclass(frozen=True)
class Phases:
    """The intervals of a request that generated at least one token, in seconds."""

    queue_s: float
    prefill_s: float
    decode_s: float
    inference_s: float
    mean_time_per_output_token_s: float | None
    """decode / (tokens - 1); None for a single token (no gap to average)."""


@dataclass(frozen=True)
class FinishedRequest:
    """What the metrics record of a request when its last output arrives.

    Attributes:
        finish_reason: `stop`, `length`, `abort` or `error` (the `finished_reason` label).
        num_prompt_tokens: prompt length in tokens.
        num_generation_tokens: tokens generated.
        e2e_s: arrival -> finish, seconds.
        phases: the intervals; None when no token was generated (a failure before it).
        group_max_generation_tokens: the most tokens any member of its sample group generated,
            set on the output that ended the group's last member.
    """

    finish_reason: str
    num_prompt_tokens: int
    num_generation_tokens: int
    e2e_s: float
    phases: Phases | None
    group_max_generation_tokens: int | None


def finished_request(times: RequestTimes, out: RequestOutput, now: float) -> FinishedRequest:
    """The record of a request whose last output `out` came from the step that ended at `now`."""
    assert out.finish_reason is not None, f"finished output of {out.request_id} has no reason"
    n = out.num_output_tokens
    phases = None
    if times.first_token is not None and times.scheduled is not None:
        decode = times.last_token - times.first_token
        phases = Phases(
            queue_s=times.scheduled - times.queued,
            prefill_s=times.first_token - times.scheduled,
            decode_s=decode,
            inference_s=times.last_token - times.scheduled,
            mean_time_per_output_token_s=decode / (n - 1) if n > 1 else None,
        )
    group = times.group.end_member(n) if times.group is not None else n
    return FinishedRequest(
        finish_reason=out.finish_reason,
        num_prompt_tokens=out.num_prompt_tokens,
        num_generation_tokens=n,
        e2e_s=now - times.arrival,
        phases=phases,
        group_max_generation_tokens=group,
    )
