"""Percentiles and per-request TTFT / TPOT / ITL from synthetic timestamps."""

from __future__ import annotations

import math
import random

import pytest
from load_test_helpers import make_record

from load_tests.client import RequestRecord
from load_tests.level_result import summarize_level
from load_tests.stats import inter_token_latencies, percentile, summarize, tpot, ttft


def test_percentile_matches_linear_interpolation() -> None:
    values = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert percentile(values, 0) == 15.0
    assert percentile(values, 100) == 50.0
    assert percentile(values, 50) == 35.0
    assert percentile(values, 40) == pytest.approx(29.0)  # pos 1.6 between 20 and 35
    assert percentile(values, 99) == pytest.approx(49.6)


def test_percentile_is_order_independent_and_matches_sorted_reference() -> None:
    rng = random.Random(7)
    values = [rng.random() for _ in range(101)]
    shuffled = values[:]
    rng.shuffle(shuffled)
    ordered = sorted(values)
    for q in (0, 1, 50, 90, 99, 100):
        assert percentile(shuffled, q) == pytest.approx(ordered[q])  # 101 samples: exact ranks


def test_percentile_edge_cases() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)
    with pytest.raises(ValueError, match="NaN"):
        percentile([1.0, math.nan], 50)


def test_summarize() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert (s.count, s.mean, s.p50) == (4, 2.5, 2.5)
    assert s.p90 == pytest.approx(3.7)
    empty = summarize([])
    assert empty.count == 0 and empty.mean is None and empty.p99 is None


def test_ttft_tpot_itl_from_timestamps() -> None:
    # sent at 10 s, first token after 0.5 s, then 4 tokens 0.1 s apart: e2e 0.9 s
    rec = make_record(10.0, [0.1, 0.1, 0.1, 0.1], first=0.5)
    assert rec.ttft == pytest.approx(0.5)
    assert rec.tpot == pytest.approx((0.9 - 0.5) / 4)
    assert rec.itl == pytest.approx([0.1] * 4)
    assert rec.e2e == pytest.approx(0.9)


def test_tpot_uses_token_count_not_chunk_count() -> None:
    # 3 chunks carrying 9 tokens (usage): TPOT spreads decode time over 8 tokens
    rec = make_record(0.0, [0.4, 0.4], first=0.2, tokens=9)
    assert rec.tpot == pytest.approx(0.8 / 8)
    assert len(rec.itl) == 2


def test_tpot_and_ttft_undefined_cases() -> None:
    assert tpot(0.0, 1.0, None, 5) is None
    assert tpot(0.0, 1.0, 0.5, 1) is None
    assert ttft(0.0, []) is None
    assert inter_token_latencies([1.0]) == []


def test_summarize_level_throughput_and_errors() -> None:
    records = [
        make_record(0.0, [0.1] * 9, first=0.2),  # ends at 1.1 s, 10 tokens
        make_record(0.5, [0.1] * 9, first=0.6),  # ends at 2.0 s, 10 tokens
        RequestRecord(start=0.1, end=0.3, error="HTTP 503: busy"),
    ]
    level = summarize_level(4, records)
    assert (level.num_requests, level.completed, level.errors) == (3, 2, 1)
    assert level.duration_s == pytest.approx(2.0)
    assert level.total_output_tokens == 20
    assert level.output_throughput == pytest.approx(10.0)
    assert level.request_throughput == pytest.approx(1.0)
    assert level.ttft_ms.p50 == pytest.approx(400.0)
    assert level.tpot_ms.p50 == pytest.approx(100.0)
    assert level.itl_ms.count == 18
    assert level.error_samples == {"HTTP 503: busy": 1}


def test_summarize_level_shared_prefix_fields() -> None:
    first = make_record(0.0, [0.1], first=2.0)
    rest = [make_record(3.0, [0.1], first=f) for f in (0.2, 0.4, 0.3)]
    level = summarize_level(2, [first, *rest], prefix_first=first, prefix_rest=rest)
    assert level.first_ttft_ms == pytest.approx(2000.0)
    assert level.rest_ttft_p50_ms == pytest.approx(300.0)
