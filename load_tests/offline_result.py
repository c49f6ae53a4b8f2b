"""What one offline engine run measured."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class OfflineResult:
    """Throughput of one engine over a whole workload submitted at once.

    Attributes:
        name: engine name (`ascend-router` or `transformers-cb`).
        num_requests: requests submitted.
        total_output_tokens: tokens generated, all requests together.
        duration_s: first submission to last completion (s).
        output_throughput: output tokens per second.
        request_throughput: finished requests per second.
        mean_step_ms: mean wall time of one engine step (ms); None if the engine hides steps.
        num_steps: engine steps taken; None if unknown.
        length_mismatches: requests whose output length differs from the requested one.
        errors: requests that failed.
        outputs: generated token ids per request index (not written to JSON).
        extra: engine-specific figures (e.g. preemptions, KV sizing).
    """

    name: str
    num_requests: int
    total_output_tokens: int
    duration_s: float
    mean_step_ms: float | None
    num_steps: int | None
    length_mismatches: int
    errors: int
    outputs: list[list[int]] = field(repr=False, default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def output_throughput(self) -> float:
        """Output tokens per second."""
        return self.total_output_tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def request_throughput(self) -> float:
        """Finished requests per second."""
        done = self.num_requests - self.errors
        return done / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (token ids left out)."""
        return {
            "name": self.name,
            "num_requests": self.num_requests,
            "total_output_tokens": self.total_output_tokens,
            "duration_s": self.duration_s,
            "output_throughput": self.output_throughput,
            "request_throughput": self.request_throughput,
            "mean_step_ms": self.mean_step_ms,
            "num_steps": self.num_steps,
            "length_mismatches": self.length_mismatches,
            "errors": self.errors,
            "extra": self.extra,
        }
