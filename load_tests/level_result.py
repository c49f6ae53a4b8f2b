"""The measured outcome of one concurrency level, reduced from per-request records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from load_tests.client import RequestRecord
from load_tests.stats import Summary, percentile, summarize

_MS = 1000.0
_MAX_ERROR_SAMPLES = 5


@dataclass(frozen=True)
class LevelResult:
    """Throughput and latency of one level.

    Attributes:
        concurrency: requests in flight at most.
        num_requests: requests sent (completed + errors).
        completed: requests that streamed to the end.
        errors: failed or timed-out requests.
        error_samples: up to five distinct error messages with their counts.
        duration_s: first request start to last request end (s).
        request_throughput: completed requests per second.
        output_throughput: output tokens per second (all completed requests).
        total_output_tokens: output tokens of completed requests.
        usage_reported: completed requests whose token count came from server usage.
        ttft_ms, tpot_ms, itl_ms, e2e_ms: distributions in milliseconds (TPOT in ms/token).
        first_ttft_ms: shared-prefix scenario only: TTFT of the first (cold) request.
        rest_ttft_p50_ms: shared-prefix scenario only: median TTFT of the later requests.
        server_after: the server's `vllm:*` figures for the model once the level ended (KV
            usage %, requests running/waiting, preemptions so far), when it serves them.
    """

    concurrency: int
    num_requests: int
    completed: int
    errors: int
    error_samples: dict[str, int]
    duration_s: float
    request_throughput: float
    output_throughput: float
    total_output_tokens: int
    usage_reported: int
    ttft_ms: Summary
    tpot_ms: Summary
    itl_ms: Summary
    e2e_ms: Summary
    first_ttft_ms: float | None = None
    rest_ttft_p50_ms: float | None = None
    server_after: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (see `results.LEVEL_KEYS`)."""
        out = dict(self.__dict__)
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            out[key] = getattr(self, key).to_dict()
        return out


def _ms(values: Sequence[float | None]) -> list[float]:
    return [v * _MS for v in values if v is not None]


def summarize_level(
    concurrency: int,
    records: Sequence[RequestRecord],
    prefix_first: RequestRecord | None = None,
    prefix_rest: Sequence[RequestRecord] = (),
    server_after: dict[str, float] | None = None,
) -> LevelResult:
    """Reduce the records of one level to a `LevelResult`.

    Args:
        concurrency: the level's concurrency bound.
        records: every request of the level, failed ones included.
        prefix_first: the cold first request of a shared-prefix level.
        prefix_rest: the later requests of a shared-prefix level.
        server_after: see `LevelResult.server_after`.
    """
    ok = [r for r in records if r.ok]
    timed = [r for r in records if r.end > r.start]
    duration = max(r.end for r in timed) - min(r.start for r in timed) if timed else 0.0
    tokens = sum(r.output_tokens for r in ok)
    errors = Counter(r.error for r in records if r.error is not None)
    itl = [gap for r in ok for gap in r.itl]
    first_ttft = None
    rest_p50 = None
    if prefix_first is not None and prefix_first.ok and prefix_first.ttft is not None:
        first_ttft = prefix_first.ttft * _MS
    if prefix_rest:
        rest_p50 = percentile(_ms([r.ttft for r in prefix_rest if r.ok]), 50)
    return LevelResult(
        concurrency=concurrency,
        num_requests=len(records),
        completed=len(ok),
        errors=len(records) - len(ok),
        error_samples=dict(errors.most_common(_MAX_ERROR_SAMPLES)),
        duration_s=duration,
        request_throughput=len(ok) / duration if duration > 0 else 0.0,
        output_throughput=tokens / duration if duration > 0 else 0.0,
        total_output_tokens=tokens,
        usage_reported=sum(r.usage_reported for r in ok),
        ttft_ms=summarize(_ms([r.ttft for r in ok])),
        tpot_ms=summarize(_ms([r.tpot for r in ok])),
        itl_ms=summarize(_ms(itl)),
        e2e_ms=summarize(_ms([r.e2e for r in ok])),
        first_ttft_ms=first_ttft,
        server_after=server_after,
        rest_ttft_p50_ms=rest_p50,
    )
