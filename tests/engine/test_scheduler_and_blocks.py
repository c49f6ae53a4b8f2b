"""Block manager invariants and scheduler behaviour (budgets, chunking, preemption, abort)."""

from __future__ import annotations

import pytest

from engine.block_manager import BlockManager
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence, SequenceStatus


def make_seq(n_prompt: int, arrival: int, rid: str | None = None) -> Sequence:
    return Sequence(rid or f"r{arrival}", list(range(n_prompt)), SamplingParams(), arrival)


def make_scheduler(
    blocks: int = 16, block_size: int = 4, seqs: int = 8, budget: int = 32, cache: bool = False
):
    bm = BlockManager(blocks, block_size, enable_prefix_caching=cache)
    return bm, Scheduler(bm, seqs, budget)


def advance(sch: Scheduler, batch) -> None:
    """What the engine does after a step: KV computed and committed, a token sampled if due."""
    for s in batch.scheduled:
        s.seq.num_computed_tokens += s.num_new_tokens
        sch.block_manager.commit(s.seq)
        if s.sample:
            s.seq.append_output(7)


def test_blocks_allocate_free_and_refuse_when_full() -> None:
    bm = BlockManager(4, 4)
    a, b = make_seq(0, 0), make_seq(0, 1)
    assert bm.ensure_capacity(a, 9) and len(a.block_table) == 3
    assert not bm.ensure_capacity(b, 8) and b.block_table == []  # refusal changes nothing
    bm.free(a)
    assert bm.num_free_blocks == 4 and all(c == 0 for c in bm.pool.ref_counts)
    with pytest.raises(AssertionError, match="double free"):
        a.block_table = [0]
        bm.free(a)


def test_token_budget_chunks_long_prompts_and_decodes_keep_running() -> None:
    _, sch = make_scheduler(budget=10)
    short, long = make_seq(3, 0), make_seq(25, 1)
    sch.add(short)
    sch.add(long)
    batch = sch.schedule()
    assert [(s.seq.request_id, s.num_new_tokens, s.sample) for s in batch.scheduled] == [
        ("r0", 3, True),
        ("r1", 7, False),
    ]
    advance(sch, batch)
    for expected_chunk in (9, 9):
        batch = sch.schedule()
        got = {s.seq.request_id: s.num_new_tokens for s in batch.scheduled}
        assert got == {"r0": 1, "r1": expected_chunk}  # the decode is never starved
        assert batch.num_tokens <= 10
        advance(sch, batch)
    assert long.output_token_ids == [7]  # prefill finished, first token sampled


def test_max_num_seqs_caps_the_running_batch() -> None:
    _, sch = make_scheduler(seqs=2, budget=100)
    for i in range(4):
        sch.add(make_seq(2, i))
    assert len(sch.schedule().scheduled) == 2 and len(sch.waiting) == 2


def test_preemption_takes_the_newest_and_it_resumes_later() -> None:
    _, sch = make_scheduler(blocks=4, block_size=4, budget=100)
    old, new = make_seq(8, 0), make_seq(8, 1)
    sch.add(old)
    sch.add(new)
    advance(sch, sch.schedule())  # both prefilled: 2 blocks each, then one token sampled
    batch = sch.schedule()  # each needs a 3rd block for token 9: the newest is preempted
    assert batch.num_preempted == 1 and [s.seq for s in batch.scheduled] == [old]
    assert new.status is SequenceStatus.WAITING and new.num_computed_tokens == 0
    assert new.block_table == [] and sch.waiting[0] is new
    advance(sch, batch)
    sch.remove(old)
    batch = sch.schedule()
    assert [s.seq for s in batch.scheduled] == [new] and batch.scheduled[0].num_new_tokens == 9
    assert sch.num_preemptions == 1


@pytest.mark.parametrize("when", ["waiting", "mid-prefill", "decoding"])
def test_abort_at_any_point_frees_every_block(when: str) -> None:
    bm, sch = make_scheduler(budget=8)
    seq = make_seq(20, 0)
    sch.add(seq)
    if when != "waiting":
        advance(sch, sch.schedule())
    if when == "decoding":
        advance(sch, sch.schedule())
        advance(sch, sch.schedule())
        assert seq.output_token_ids
    sch.remove(seq)
    assert bm.num_free_blocks == bm.num_blocks and not sch.has_work()


def test_prefix_cache_shares_full_blocks_and_counts_hits() -> None:
    bm, sch = make_scheduler(blocks=8, block_size=4, budget=100, cache=True)
    first = make_seq(10, 0)
    sch.add(first)
    advance(sch, sch.schedule())  # 10 prompt tokens computed: blocks 0 and 1 are full
    second = Sequence("r1", list(range(9)) + [99, 98], SamplingParams(), 1)
    sch.add(second)
    batch = sch.schedule()
    new = {s.seq.request_id: (s.num_new_tokens, s.seq.block_table[:2]) for s in batch.scheduled}
    assert new["r1"][0] == 11 - 8 and new["r1"][1] == first.block_table[:2]
    assert bm.pool.ref_counts[first.block_table[0]] == 2
    assert bm.stats.hits == 2 and bm.stats.queries == 4  # every full block is a query
    assert (first.num_cached_tokens, second.num_cached_tokens) == (0, 8)  # usage's cached_tokens


def test_full_hit_still_computes_the_last_token_and_lru_eviction() -> None:
    bm, sch = make_scheduler(blocks=4, block_size=4, budget=100, cache=True)
    a = make_seq(8, 0)
    sch.add(a)
    advance(sch, sch.schedule())
    sch.remove(a)  # blocks free but cached
    again = make_seq(8, 1)
    sch.add(again)
    batch = sch.schedule()
    assert batch.scheduled[0].num_new_tokens == 4  # one block reused, the last one recomputed
    sch.remove(again)
    other = Sequence("x", [50] * 16, SamplingParams(), 2)  # needs all 4 blocks: evicts the rest
    assert bm.ensure_capacity(other, 16)
    assert bm.match_prefix(make_seq(8, 3)) == 0
