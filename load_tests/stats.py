"""Latency statistics: percentiles and per-request TTFT / TPOT / ITL from timestamps.

All times are seconds (floats from `time.perf_counter`); summaries convert nothing, so callers
pick the unit they print in.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

PERCENTILES: tuple[int, ...] = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile with linear interpolation (numpy's default `linear` method).

    Args:
        values: samples, in any order.
        q: percentile in [0, 100].

    Returns:
        The interpolated value, or None when `values` is empty.

    Raises:
        ValueError: `q` is outside [0, 100] or a sample is NaN.
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is outside [0, 100]")
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        raise ValueError("percentile of a sequence containing NaN")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    frac = pos - lo
    return ordered[lo] + (ordered[hi] - ordered[lo]) * frac


@dataclass(frozen=True)
class Summary:
    """Distribution summary of one metric (same unit as the samples).

    Attributes:
        count: number of samples.
        mean: arithmetic mean, None without samples.
        p50, p90, p99: percentiles (linear interpolation), None without samples.
    """

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-ready form."""
        return {
            "count": self.count,
            "mean": self.mean,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
        }


def summarize(values: Sequence[float]) -> Summary:
    """Count, mean and p50/p90/p99 of `values` (all None but count when empty)."""
    if not values:
        return Summary(0, None, None, None, None)
    return Summary(
        count=len(values),
        mean=sum(values) / len(values),
        p50=percentile(values, 50),
        p90=percentile(values, 90),
        p99=percentile(values, 99),
    )


def ttft(start: float, chunk_times: Sequence[float]) -> float | None:
    """Time to first token: first content chunk minus request start (s); None without chunks."""
    if not chunk_times:
        return None
    return chunk_times[0] - start


def tpot(start: float, end: float, first_token: float | None, output_tokens: int) -> float | None:
    """Time per output token after the first: (e2e - TTFT) / (output_tokens - 1), in s/token.

    Args:
        start: request start time (s).
        end: time the response finished (s).
        first_token: arrival time of the first content chunk (s), None if there was none.
        output_tokens: tokens generated (from `usage`, or the chunk count as a fallback).

    Returns:
        The mean decode time per token, or None with fewer than two tokens.
    """
    if first_token is None or output_tokens < 2:
        return None
    e2e = end - start
    first = first_token - start
    return (e2e - first) / (output_tokens - 1)


def inter_token_latencies(chunk_times: Sequence[float]) -> list[float]:
    """Gaps between consecutive content chunks (s); a chunk may carry more than one token."""
    return [b - a for a, b in itertools.pairwise(chunk_times)]
