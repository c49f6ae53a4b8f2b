"""Engine metrics recorded by the engine front (`AsyncEngine`) on the real SmolLM2 engine: every
gap between tokens under both vLLM names, the per-request mean, request phases, finish reasons
and sample groups, checked against each other and against the requests run."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.async_engine import AsyncEngine
from engine.llm_engine import LLMEngine
from engine.metrics import EngineMetrics, token_count_buckets
from engine.request_stats import SampleGroup
from engine.sampling_params import SamplingParams

PROMPT = [1, 504, 3458, 314, 260, 3777]
LABELS = {"model_name": "m", "replica": "r0"}
_IDS = itertools.count()


@pytest.fixture(scope="module")
def front(make_engine: Callable[..., LLMEngine]) -> Iterator[AsyncEngine]:
    engine = AsyncEngine(lambda: make_engine(max_model_len=512, num_kv_blocks=64))
    try:
        yield engine
    finally:
        engine.shutdown()


def fresh_metrics(front: AsyncEngine) -> EngineMetrics:
    front.metrics = EngineMetrics("m", "r0", front.max_model_len)
    return front.metrics


def samples(metrics: EngineMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, labels) -> value, from the exposition text as a scraper reads it."""
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict, name: str, **extra: str) -> float:
    return found[(name, tuple(sorted({**LABELS, **extra}.items())))]


async def run(front: AsyncEngine, max_tokens: int, group: SampleGroup | None = None) -> int:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    stream = await front.add(f"r{next(_IDS)}", PROMPT, params, group)
    return sum([len(out.new_token_ids) async for out in stream])


def test_token_count_buckets_are_vllms_1_2_5_up_to_the_context() -> None:
    assert token_count_buckets(100) == (1, 2, 5, 10, 20, 50, 100)
    assert token_count_buckets(2048)[-3:] == (500, 1000, 2000)


def test_every_gap_is_recorded_under_both_names_and_the_phases_add_up(front: AsyncEngine) -> None:
    metrics = fresh_metrics(front)
    group = SampleGroup(3)

    async def traffic() -> list[int]:
        singles = [run(front, 6), run(front, 6)]
        samples_of_one_prompt = [run(front, n, group) for n in (4, 7, 5)]
        return list(await asyncio.gather(*singles, *samples_of_one_prompt))

    tokens = asyncio.run(traffic())
    assert tokens == [6, 6, 4, 7, 5]
    found = samples(metrics)

    gaps = sum(n - 1 for n in tokens)
    itl, tpot = "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"
    assert value(found, f"{itl}_count") == gaps, "one observation per gap between tokens"
    for suffix in ("_count", "_sum"):
        assert value(found, f"{tpot}{suffix}") == value(found, f"{itl}{suffix}")
    assert value(found, f"{tpot}_bucket", le="0.1") == value(found, f"{itl}_bucket", le="0.1")

    # the gaps of a request telescope to its decode time
    decode = value(found, "vllm:request_decode_time_seconds_sum")
    assert value(found, f"{itl}_sum") == pytest.approx(decode, rel=1e-9)
    assert value(found, "vllm:request_time_per_output_token_seconds_count") == len(tokens)
    mean_sum = value(found, "vllm:request_time_per_output_token_seconds_sum")
    assert 0 < mean_sum <= decode

    for name in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:request_inference_time_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
    ):
        assert value(found, f"{name}_count") == len(tokens), name
    e2e = value(found, "vllm:e2e_request_latency_seconds_sum")
    phases = sum(
        value(found, f"vllm:request_{p}_time_seconds_sum") for p in ("queue", "prefill", "decode")
    )
    assert 0 < phases <= e2e
    inference = value(found, "vllm:request_inference_time_seconds_sum")
    prefill = value(found, "vllm:request_prefill_time_seconds_sum")
    assert inference == pytest.approx(prefill + decode, rel=1e-9)

    assert value(found, "vllm:request_prompt_tokens_sum") == len(PROMPT) * len(tokens)
    assert value(found, "vllm:request_generation_tokens_sum") == sum(tokens)
    assert value(found, "vllm:generation_tokens_total") == sum(tokens)
    # the three samples of one prompt count once, with their most tokens
    assert value(found, "vllm:request_max_num_generation_tokens_count") == 3
    assert value(found, "vllm:request_max_num_generation_tokens_sum") == 6 + 6 + 7

    assert value(found, "vllm:request_success_total", finished_reason="length") == len(tokens)
    for reason in ("stop", "abort", "error"):
        assert value(found, "vllm:request_success_total", finished_reason=reason) == 0
    kv = value(found, "vllm:kv_cache_usage_perc")
    assert value(found, "vllm:gpu_cache_usage_perc") == kv


def test_every_series_carries_the_model_and_replica_labels(front: AsyncEngine) -> None:
    metrics = fresh_metrics(front)
    asyncio.run(run(front, 3))
    for (name, labels), _ in samples(metrics).items():
        assert {"model_name": "m", "replica": "r0"}.items() <= dict(labels).items(), name


def test_a_request_its_caller_abandons_is_not_counted_as_finished(front: AsyncEngine) -> None:
    metrics = fresh_metrics(front)

    async def abandon_then_run() -> None:
        params = SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True)
        stream = await front.add("gone", PROMPT, params)
        await anext(stream)
        await stream.aclose()
        await run(front, 2)

    asyncio.run(abandon_then_run())
    found = samples(metrics)
    assert value(found, "vllm:time_to_first_token_seconds_count") == 2
    assert value(found, "vllm:e2e_request_latency_seconds_count") == 1
    assert value(found, "vllm:request_success_total", finished_reason="length") == 1
