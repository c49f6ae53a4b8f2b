"""Batch sizing against a latency target (`engine.slo`): the AIMD controller on scripted step
times (cuts over target, raises while requests wait and there is room, bounds, the drain of a
lowered limit, TTFT's pull on the token budget), the scheduler under a lowered limit, and the
real SmolLM2 engine whose limits fall under a very low target and climb back to the configured
ones under a high one, with the same greedy tokens as an engine without `slo`; the limits as
metrics and in the replica's health reply."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
from engine_helpers import greedy
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from configs.engine_config import EngineConfig
from configs.slo_config import SloConfig
from engine.async_engine import AsyncEngine
from engine.block_manager import BlockManager
from engine.llm_engine import LLMEngine
from engine.metrics import EngineMetrics
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from engine.slo_controller import BatchLimits, SloController, StepSample, p90
from router.replica_metrics import batch_limits

CEILING = BatchLimits(64, 512)


def controller(**slo: float) -> SloController:
    """A controller over `CEILING` (token floor 64, token step 32), window 4 unless given,
    started at the configured limits (not slow start)."""
    return SloController(SloConfig(**{"window_steps": 4, **slo}), CEILING, CEILING.max_num_seqs)


def feed(
    ctl: SloController,
    ms: float,
    running: int,
    steps: int = 4,
    waiting: int = 5,
    tokens: int | None = None,
    decoded: bool = True,
) -> BatchLimits:
    """`steps` scripted steps of `ms` milliseconds; the limits after the last."""
    step = StepSample(ms / 1e3, running, tokens or running, decoded, waiting)
    for _ in range(steps):
        limits = ctl.observe(step)
    return limits


def test_p90_is_the_nearest_rank() -> None:
    assert p90([float(v) for v in range(10, 0, -1)]) == 9.0
    assert p90([3.0]) == 3.0
    assert p90([1.0] * 18 + [50.0, 60.0]) == 1.0  # 2 spikes in 20 are the top 10 %


def test_over_target_cuts_from_what_the_window_ran_once_per_full_window() -> None:
    ctl = controller(tpot_ms=10)
    assert feed(ctl, 20, running=32, steps=3) == CEILING, "no decision before the window is full"
    # 32 running (not the 64 allowed) x 0.75; tokens from the largest step, to their floor
    assert feed(ctl, 20, running=32, steps=1, tokens=40) == BatchLimits(24, 64)
    state = ctl.state()
    assert state.tpot_p90_s == pytest.approx(0.020) and state.num_decreases == 1


def test_a_lowered_limit_is_not_cut_again_before_the_batch_drains_to_it() -> None:
    ctl = controller(tpot_ms=10)
    feed(ctl, 20, running=32)
    assert feed(ctl, 20, running=32, steps=50) == BatchLimits(24, 64), "32 > 24: still draining"
    assert feed(ctl, 20, running=24, steps=3).max_num_seqs == 24, "a fresh window fills first"
    assert feed(ctl, 20, running=24, steps=1).max_num_seqs == 18


def test_room_and_a_waiting_queue_raise_by_one_per_window_up_to_the_configured() -> None:
    ctl = controller(tpot_ms=10)
    feed(ctl, 20, running=32)  # -> 24 sequences, 64 tokens
    assert feed(ctl, 5, running=24, waiting=0) == BatchLimits(24, 64), "nobody waits: no rise"
    assert feed(ctl, 9.5, running=24) == BatchLimits(24, 64), "dead band: 9.5 > 0.9 x 10"
    assert feed(ctl, 5, running=10) == BatchLimits(24, 96), "the seq limit was not reached"
    assert feed(ctl, 5, running=24) == BatchLimits(25, 128)
    for _ in range(100):
        limits = feed(ctl, 5, running=ctl.limits.max_num_seqs)
    assert limits == CEILING and ctl.state().num_increases == 40 + 1


def test_slow_start_doubles_from_min_num_seqs_until_the_first_cut_then_adds_one() -> None:
    ctl = SloController(SloConfig(tpot_ms=10, window_steps=4, min_num_seqs=2), CEILING)
    assert ctl.limits == BatchLimits(2, 512)
    assert feed(ctl, 5, running=2).max_num_seqs == 4
    assert feed(ctl, 5, running=4).max_num_seqs == 8
    assert feed(ctl, 5, running=8).max_num_seqs == 16
    assert feed(ctl, 20, running=16).max_num_seqs == 12  # over: x 0.75, slow start ends
    assert feed(ctl, 5, running=12).max_num_seqs == 13


def test_repeated_cuts_stop_at_the_floors() -> None:
    ctl = controller(tpot_ms=1, min_num_seqs=3)
    for _ in range(20):
        feed(ctl, 5, running=ctl.limits.max_num_seqs, tokens=ctl.limits.max_num_batched_tokens)
    assert ctl.limits == BatchLimits(3, 64)  # min_num_seqs; min(max_num_seqs, max tokens)


def test_prefill_only_steps_are_no_tpot_samples() -> None:
    ctl = controller(tpot_ms=10)
    assert feed(ctl, 500, running=32, steps=20, decoded=False) == CEILING
    assert ctl.state().tpot_p90_s is None


def test_late_first_tokens_grow_the_token_budget_while_tpot_cuts_the_batch() -> None:
    ctl = controller(tpot_ms=10, ttft_ms=100)
    feed(ctl, 20, running=32, tokens=300)
    assert ctl.limits == BatchLimits(24, 225)  # TTFT unknown yet: both cut
    ctl.queued("a", now=0.0)
    ctl.first_token("a", now=0.5)  # 500 ms to the first token: over 100
    assert ctl.state().ttft_p90_s == pytest.approx(0.5)
    assert feed(ctl, 20, running=24) == BatchLimits(18, 225 + 32)
    ctl.queued("b", now=1.0)
    ctl.forget("b")  # aborted before its first token: no sample
    ctl.first_token("b", now=9.0)
    assert ctl.state().ttft_p90_s == pytest.approx(0.5)


def test_bad_slo_settings_are_refused_naming_the_fix() -> None:
    with pytest.raises(ValidationError, match="slo needs a target"):
        SloConfig()
    with pytest.raises(ValidationError, match="min_num_seqs 9 is over max_num_seqs 8"):
        EngineConfig(max_num_seqs=8, slo={"tpot_ms": 50, "min_num_seqs": 9})
    with pytest.raises(ValidationError, match="tpot_ms"):
        SloConfig(tpot_ms=0)
    with pytest.raises(ValidationError, match="finite number"):
        SloConfig(tpot_ms=float("inf"))


def test_a_lowered_limit_stops_admission_and_preempts_nobody() -> None:
    sch = Scheduler(BlockManager(64, 4), 8, 64)
    for i in range(6):
        sch.add(Sequence(f"r{i}", [1, 2, 3], greedy(4), i))
    assert len(sch.schedule().scheduled) == 6
    sch.set_limits(BatchLimits(2, 64))
    sch.add(Sequence("late", [1, 2, 3], greedy(4), 6))
    batch = sch.schedule()
    assert len(batch.scheduled) == 6 and [s.request_id for s in sch.waiting] == ["late"]
    assert batch.num_preempted == 0
    with pytest.raises(AssertionError, match="over the configured"):
        sch.set_limits(BatchLimits(9, 64))


PROMPTS = [[1, 504, 3458, 314, 260 + i] for i in range(10)]


def run_all(engine: LLMEngine, prefix: str) -> tuple[dict[str, list[int]], list[BatchLimits]]:
    """Every prompt at once, 4 greedy tokens each; the tokens by prompt index and the limits
    after every step."""
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(f"{prefix}{i}", prompt, greedy(4, ignore_eos=True))
    out: dict[str, list[int]] = {}
    seen = []
    while engine.has_unfinished():
        for o in engine.step():
            out.setdefault(o.request_id.removeprefix(prefix), []).extend(o.new_token_ids)
        seen.append(engine.scheduler.limits)
    return out, seen


@pytest.fixture(scope="module")
def slo_engine(make_engine: Callable[..., LLMEngine]) -> Iterator[LLMEngine]:
    """SmolLM2 with 4 sequences at most and a TPOT target no CPU step meets (1 µs); one
    intra-op thread, as the plain engine's (two stall at OpenMP barriers on a loaded host)."""
    engine = make_engine(max_num_seqs=4, num_threads=1, slo={"tpot_ms": 0.001, "window_steps": 2})
    yield engine
    engine.shutdown()


def test_the_limit_rises_under_a_high_target_falls_under_a_low_one_tokens_unchanged(
    make_engine: Callable[..., LLMEngine], slo_engine: LLMEngine
) -> None:
    plain = make_engine(max_num_seqs=4, num_threads=1)
    try:
        expected, fixed = run_all(plain, "plain")
    finally:
        plain.shutdown()
    assert set(fixed) == {BatchLimits(4, 2048)}
    tokens, seen = run_all(slo_engine, "low")
    assert tokens == expected
    assert seen[0] == BatchLimits(1, 2048), "slow start: one sequence until measured"
    assert {s.max_num_seqs for s in seen} == {1}
    assert min(s.max_num_batched_tokens for s in seen) == 4  # min(max_num_seqs, 2048)

    assert slo_engine.slo is not None
    slo_engine.slo.config = SloConfig(tpot_ms=1e6, window_steps=2)  # retuned: room now
    tokens, seen = run_all(slo_engine, "high")
    assert tokens == expected
    assert seen[-1].max_num_seqs > 1 and max(s.max_num_seqs for s in seen) <= 4
    while slo_engine.scheduler.limits.max_num_seqs < 4:  # keep a queue until it is back
        tokens, seen = run_all(slo_engine, f"more{len(seen)}")
        assert tokens == expected
    back = slo_engine.stats().batch_limits
    assert back is not None and back.max_num_seqs == 4 and back.max_num_batched_tokens > 4

    slo_engine.slo.config = SloConfig(tpot_ms=0.001, window_steps=2)  # retuned: over again
    tokens, seen = run_all(slo_engine, "again")
    assert tokens == expected and seen[-1].max_num_seqs < 4


def test_the_limits_are_metrics_and_in_the_health_reply(slo_engine: LLMEngine) -> None:
    front = AsyncEngine(lambda: slo_engine)
    front.metrics = metrics = EngineMetrics("m", "r0", front.max_model_len)

    async def traffic() -> None:
        params = greedy(4, ignore_eos=True)
        streams = [await front.add(f"m{i}", p, params) for i, p in enumerate(PROMPTS)]
        for stream in streams:
            async for _ in stream:
                pass

    try:
        asyncio.run(traffic())
        stats = front.stats()
    finally:
        front.shutdown()
    text = metrics.exposition().decode()
    found = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    reply = stats.batching()
    limits, slo = reply["batch_limits"], reply["slo"]
    assert isinstance(limits, dict) and isinstance(slo, dict)
    assert found["ascend_router_engine_max_num_seqs"] == limits["max_num_seqs"]
    assert found["ascend_router_engine_max_num_batched_tokens"] == limits["max_num_batched_tokens"]
    assert found["ascend_router_engine_tpot_p90_seconds"] == slo["tpot_p90_s"] > 0
    assert found["ascend_router_engine_ttft_p90_seconds"] == slo["ttft_p90_s"] > 0
    assert slo["num_decreases"] >= 1  # the 1 µs target (or the earlier test's run) cut it
    assert batch_limits([metrics.exposition()]) == {"m": {"r0": limits}}  # the router's /health
