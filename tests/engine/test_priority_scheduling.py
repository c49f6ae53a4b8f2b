"""Priority scheduling (vLLM's `--scheduling-policy priority`): a lower `priority` is admitted
first, equal priorities first come, first served, and under KV pressure the least urgent
running sequence is preempted, whatever its age; a preempted request still ends with the tokens
it has alone. Real SmolLM2 engines, plus scheduler-only cases."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from engine_helpers import assert_blocks_free, greedy, run_to_completion, step
from test_scheduler_and_blocks import advance

from engine.block_manager import BlockManager
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence, SequenceStatus

LOW_PROMPT = [100, 101, 102, 103, 104, 105, 106, 107]
HIGH_PROMPT = [200, 201, 202, 203, 204, 205, 206, 207]
"""Two 8-token prompts: two 4-token blocks each, so two of them fill a 4-block cache."""


@pytest.fixture(scope="module")
def one_at_a_time(make_engine: Callable[..., LLMEngine]) -> LLMEngine:
    """One running sequence at most: the order requests run in is the order they are admitted."""
    return make_engine(max_model_len=32, num_kv_blocks=8, block_size=4, max_num_seqs=1)


@pytest.fixture(scope="module")
def tight(make_engine: Callable[..., LLMEngine]) -> LLMEngine:
    """4 blocks of 4 tokens: the two 8-token prompts fill it, so their first decode preempts one.
    No prefix cache, so a preempted request is recomputed from scratch."""
    return make_engine(max_model_len=16, num_kv_blocks=4, block_size=4, enable_prefix_caching=False)


def admission_order(engine: LLMEngine, priorities: list[tuple[str, int]]) -> list[str]:
    """Queue one-token requests (id, priority) in this order before any step, run them; the
    ids in the order their token came out."""
    for i, (rid, priority) in enumerate(priorities):
        engine.add_request(rid, [300 + i, 301, 302], greedy(1, priority=priority))
    out = run_to_completion(engine)
    assert_blocks_free(engine)
    return list(out)


def test_the_higher_priority_request_is_admitted_first(one_at_a_time: LLMEngine) -> None:
    one_at_a_time.add_request("low", [300, 301], greedy(1, priority=5))
    one_at_a_time.add_request("high", [310, 311], greedy(1, priority=0))
    assert [o.request_id for o in one_at_a_time.step()] == ["high"], "the later, higher one"
    assert [o.request_id for o in one_at_a_time.step()] == ["low"]
    order = admission_order(one_at_a_time, [("p5", 5), ("p0", 0), ("p3", 3), ("m2", -2)])
    assert order == ["m2", "p0", "p3", "p5"]


def test_equal_priorities_are_first_come_first_served(one_at_a_time: LLMEngine) -> None:
    assert admission_order(one_at_a_time, [("a", 2), ("b", 2), ("c", 2)]) == ["a", "b", "c"]
    order = admission_order(one_at_a_time, [("x1", 1), ("y0", 0), ("x2", 1), ("y1", 0)])
    assert order == ["y0", "y1", "x1", "x2"]


def start_contention(engine: LLMEngine, out: dict[str, list[int]]) -> None:
    """The low-priority request arrives first, the high one second; two steps: both prefill
    (filling the cache), then both need a third block and one of them is preempted."""
    engine.add_request("low", LOW_PROMPT, greedy(4, priority=5, ignore_eos=True))
    engine.add_request("high", HIGH_PROMPT, greedy(4, priority=0, ignore_eos=True))
    step(engine, out)
    step(engine, out)


def test_kv_pressure_preempts_the_lower_priority_request_not_the_newest(tight: LLMEngine) -> None:
    sched = tight.scheduler
    before = sched.num_preemptions
    out: dict[str, list[int]] = {}
    start_contention(tight, out)
    assert sched.num_preemptions == before + 1
    assert [s.request_id for s in sched.running] == ["high"]
    [low] = sched.waiting
    assert (low.request_id, low.status, low.block_table) == ("low", SequenceStatus.WAITING, [])
    assert (len(out["high"]), len(out["low"])) == (2, 1), "low lost its cache after one token"
    run_to_completion(tight, out)
    assert (len(out["high"]), len(out["low"])) == (4, 4)
    assert_blocks_free(tight)


def test_a_preempted_request_ends_with_the_tokens_it_has_alone(tight: LLMEngine) -> None:
    before = tight.scheduler.num_preemptions
    contended: dict[str, list[int]] = {}
    start_contention(tight, contended)
    run_to_completion(tight, contended)
    assert tight.scheduler.num_preemptions == before + 1, "the scenario must preempt"
    for rid, prompt, priority in (("low", LOW_PROMPT, 5), ("high", HIGH_PROMPT, 0)):
        tight.add_request(f"{rid}-alone", prompt, greedy(4, priority=priority, ignore_eos=True))
        alone = run_to_completion(tight)
        assert contended[rid] == alone[f"{rid}-alone"], rid
    assert tight.scheduler.num_preemptions == before + 1
    assert_blocks_free(tight)


# ---- the scheduler alone (no model) --------------------------------------------------------


def seq(rid: str, n_prompt: int, arrival: int, priority: int) -> Sequence:
    return Sequence(rid, list(range(n_prompt)), SamplingParams(priority=priority), arrival)


def test_a_preempted_sequence_waits_at_its_priority_place() -> None:
    sch = Scheduler(BlockManager(4, 4, enable_prefix_caching=False), 8, 100)
    a, b = seq("A", 8, 0, 1), seq("B", 8, 1, 0)
    sch.add(a)
    sch.add(b)
    advance(sch, sch.schedule())  # both prefilled: the 4 blocks are taken
    sch.add(seq("C", 2, 2, 0))
    sch.add(seq("D", 2, 3, 2))
    batch = sch.schedule()  # B needs a third block: A (priority 1), the older, gives its up
    assert batch.num_preempted == 1 and [s.seq for s in batch.scheduled] == [b]
    assert a.status is SequenceStatus.WAITING and a.block_table == []
    assert [s.request_id for s in sch.waiting] == ["C", "A", "D"], "by (priority, arrival)"


def test_a_waiting_sequence_never_preempts_a_running_one() -> None:
    sch = Scheduler(BlockManager(4, 4, enable_prefix_caching=False), 8, 100)
    low = seq("low", 9, 0, 5)
    sch.add(low)
    advance(sch, sch.schedule())  # 3 of the 4 blocks
    sch.add(seq("high", 8, 1, 0))  # needs 2 blocks; 1 is free
    batch = sch.schedule()
    assert [s.seq for s in batch.scheduled] == [low] and batch.num_preempted == 0
    assert [s.request_id for s in sch.waiting] == ["high"]
