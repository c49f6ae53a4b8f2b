"""Speculative decoding with prompt lookup (`speculative: {method: ngram}`) on the real SmolLM2
checkpoint (float32): output equal to the engine without speculation (greedy, seeded sampling,
logprobs, max_tokens, stop tokens inside an accepted run), draft verification sharing steps
with decode rows and prefill chunks, rejected tokens' blocks freed and kept out of the prefix
cache, the acceptance counters and their metrics, and graph mode on a tiny checkpoint."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from engine_helpers import AnyToken, assert_same_until_tie, chat, greedy, hf_greedy, step
from prometheus_client.parser import text_string_to_metric_families
from transformers import AutoModelForCausalLM

from configs.engine_config import EngineConfig
from engine.block_manager import BlockManager
from engine.graph_capture import wait_for_decode_graphs
from engine.llm_engine import LLMEngine
from engine.metrics import EngineMetrics
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence, SequenceStatus
from engine.spec_decode import speculator
from fixtures.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint
from npu_ops.graph_mode import CPP_COMPILERS

COPY_TEXT = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a small "
    "brass lamp and a notebook bound in faded green cloth. He wrote down the wind, the waves "
    "and the names of the ships that passed."
)
K = 4
NGRAM = {"method": "ngram", "num_speculative_tokens": K}


@pytest.fixture(scope="module")
def copy_prompt(tokenizer: Any) -> list[int]:
    return chat(tokenizer, COPY_TEXT + "\n\nRepeat the text above exactly.")


@pytest.fixture(scope="module")
def free_prompt(tokenizer: Any) -> list[int]:
    return chat(tokenizer, "Write a short poem about autumn.")


@pytest.fixture(scope="module")
def pair(make_engine: Callable[..., LLMEngine]) -> Iterator[dict[str, LLMEngine]]:
    """Engines without and with speculation; 32 tokens per step, so prompts are chunked."""
    engines = {
        "off": make_engine(max_num_batched_tokens=32),
        "on": make_engine(max_num_batched_tokens=32, speculative=NGRAM),
    }
    yield engines
    for e in engines.values():
        e.shutdown()


def run(
    engine: LLMEngine,
    requests: list[tuple[str, list[int], SamplingParams]],
    join_after: int = 0,
) -> dict[str, list[RequestOutput]]:
    """Every output per request; requests past the first join after `join_after` steps each."""
    outs: dict[str, list[RequestOutput]] = {}
    for i, (rid, prompt, params) in enumerate(requests):
        engine.add_request(rid, prompt, params)
        for _ in range(join_after if i < len(requests) - 1 else 0):
            for o in engine.step():
                outs.setdefault(o.request_id, []).append(o)
    while engine.has_unfinished():
        for o in engine.step():
            outs.setdefault(o.request_id, []).append(o)
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    return outs


def tokens(outs: list[RequestOutput]) -> list[int]:
    return [t for o in outs for t in o.new_token_ids]


def record_batches(engine: LLMEngine) -> list[SchedulerOutput]:
    """Keep every batch the engine's scheduler builds from now on."""
    batches: list[SchedulerOutput] = []
    schedule = engine.scheduler.schedule

    def recorded() -> SchedulerOutput:
        batches.append(schedule())
        return batches[-1]

    engine.scheduler.schedule = recorded  # type: ignore[method-assign]
    return batches


# ---- scheduling and blocks, without a model --------------------------------------------------


def decoding(bm: BlockManager, rid: str, draft: list[int]) -> Sequence:
    """A sequence of 3 prompt tokens and 1 generated one, whose KV holds the prompt."""
    seq = Sequence(rid, [1, 2, 3], SamplingParams(), 0)
    seq.append_output(9)
    assert bm.ensure_capacity(seq, 4)
    seq.num_computed_tokens = 3
    seq.draft_token_ids = draft
    seq.status = SequenceStatus.RUNNING
    return seq


def test_scheduler_runs_a_draft_within_the_budget() -> None:
    bm = BlockManager(num_blocks=4, block_size=4, enable_prefix_caching=False)
    sch = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=4)
    seq = decoding(bm, "a", [5, 6, 7, 8])
    sch.running.append(seq)
    (s,) = sch.schedule().scheduled  # budget 4: the last token and 3 draft tokens
    assert s.draft_token_ids == (5, 6, 7) and s.num_new_tokens == 4 and s.sample
    assert len(seq.block_table) == 2  # room for 7 tokens


def test_a_draft_that_needs_a_missing_block_is_dropped_not_preempting() -> None:
    bm = BlockManager(num_blocks=2, block_size=4, enable_prefix_caching=False)
    sch = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=32)
    a, b = decoding(bm, "a", [5, 6, 7, 8]), decoding(bm, "b", [])
    sch.running += [a, b]
    batch = sch.schedule()
    assert [(s.num_new_tokens, s.draft_token_ids) for s in batch.scheduled] == [(1, ()), (1, ())]
    assert sch.num_preemptions == 0 and batch.num_preempted == 0


def test_trim_gives_back_blocks_past_the_sequence() -> None:
    bm = BlockManager(num_blocks=6, block_size=4)
    seq = Sequence("a", list(range(6)), SamplingParams(), 0)
    assert bm.ensure_capacity(seq, 11)  # 6 tokens + a 5-token draft: 3 blocks
    bm.trim(seq)
    assert len(seq.block_table) == 2 and bm.num_free_blocks == 4
    assert (
        next(iter(bm.pool.free_blocks)) not in seq.block_table
    )  # the emptied block is reused first


# ---- the engine on SmolLM2 ------------------------------------------------------------------


def test_greedy_output_is_unchanged_in_a_mixed_chunked_batch(
    pair: dict[str, LLMEngine], copy_prompt: list[int], free_prompt: list[int]
) -> None:
    requests = [
        ("copy", copy_prompt, greedy(120, logprobs=2)),
        ("free", free_prompt, greedy(24)),
        ("grammar", free_prompt, greedy(12, constraint=AnyToken())),
        ("late-copy", copy_prompt[:-3] + copy_prompt[-3:], greedy(30)),
    ]
    ref = run(pair["off"], requests, join_after=3)
    on = pair["on"]
    before = on.stats().spec
    assert before is not None
    batches = record_batches(on)
    got = run(on, [(rid, p, params) for rid, p, params in requests], join_after=3)
    for rid in ref:
        assert tokens(got[rid]) == tokens(ref[rid]), rid
        assert got[rid][-1].finish_reason == ref[rid][-1].finish_reason, rid
    assert ref["copy"][-1].finish_reason == "stop"  # the copy ends with EOS
    lp_ref = [e for o in ref["copy"] for e in o.logprobs or ()]
    lp_got = [e for o in got["copy"] for e in o.logprobs or ()]
    assert [e.token_id for e in lp_got] == tokens(got["copy"])
    for a, b in zip(lp_got, lp_ref, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-3)
        assert [t for t, _ in a.top] == [t for t, _ in b.top]
    after = on.stats().spec
    assert after is not None
    accepted = after.num_accepted_tokens - before.num_accepted_tokens
    assert accepted / (after.num_draft_tokens - before.num_draft_tokens) > 0.5
    assert max(len(o.new_token_ids) for o in got["copy"]) == K + 1  # a whole draft kept
    # draft verification shared steps with plain decode rows and with prefill chunks
    mixed = [
        b for b in batches if any(s.draft_token_ids for s in b.scheduled) and len(b.scheduled) > 1
    ]
    assert any(
        any(not s.draft_token_ids and s.num_new_tokens > 1 for s in b.scheduled) for b in mixed
    ), "no step verified a draft next to a prefill chunk"
    assert any(any(s.num_new_tokens == 1 for s in b.scheduled) for b in mixed)
    grammar = [s for b in batches for s in b.scheduled if s.seq.request_id == "grammar"]
    assert grammar and not any(s.draft_token_ids for s in grammar)


def test_seeded_sampling_is_unchanged(pair: dict[str, LLMEngine], copy_prompt: list[int]) -> None:
    """One exponential race per emitted token, from the request's generator, as without
    speculation: the same seed gives the same tokens."""
    params = SamplingParams(max_tokens=48, temperature=0.8, top_p=0.95, seed=1234)
    ref = run(pair["off"], [("s", copy_prompt, params)])
    before = pair["on"].stats().spec
    got = run(pair["on"], [("s", copy_prompt, params)])
    after = pair["on"].stats().spec
    assert tokens(got["s"]) == tokens(ref["s"])
    assert before is not None and after is not None and after.num_drafts > before.num_drafts


@pytest.mark.parametrize("max_tokens", [2, 5, 9, 13])
def test_max_tokens_is_never_exceeded(
    pair: dict[str, LLMEngine], copy_prompt: list[int], max_tokens: int
) -> None:
    got = run(pair["on"], [("m", copy_prompt, greedy(max_tokens))])["m"]
    assert len(tokens(got)) == max_tokens and got[-1].finish_reason == "length"
    assert got[-1].num_output_tokens == max_tokens
    ref = run(pair["off"], [("m", copy_prompt, greedy(max_tokens))])["m"]
    assert tokens(got) == tokens(ref)


def test_a_stop_token_inside_an_accepted_run_ends_the_request_there(
    pair: dict[str, LLMEngine], copy_prompt: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = tokens(run(pair["off"], [("r", copy_prompt, greedy(40))])["r"])
    verified: list[list[int]] = []
    real_verify = speculator.verify

    def spy(*args: Any) -> Any:
        result = real_verify(*args)
        verified.append(result.token_ids)
        return result

    monkeypatch.setattr(speculator, "verify", spy)
    truncated = False
    for at in range(12, 30):  # stop tokens first seen at `at`, until one lands mid-run
        if ref[at] in ref[:at]:
            continue
        params = greedy(40, stop_token_ids=(ref[at],))
        verified.clear()
        got = run(pair["on"], [("s", copy_prompt, params)])["s"]
        assert tokens(got) == ref[: at + 1] and got[-1].finish_reason == "stop"
        assert got[-1].num_output_tokens == at + 1
        if any(ref[at] in run_[:-1] for run_ in verified):
            truncated = True
            break
    assert truncated, "no stop token was verified inside a longer accepted run"


def test_rejected_tokens_leave_no_block_behind_and_nothing_in_the_prefix_cache(
    make_engine: Callable[..., LLMEngine], copy_prompt: list[int], free_prompt: list[int]
) -> None:
    spec = {**NGRAM, "prompt_lookup_min": 1, "min_acceptance_rate": 0.0}  # always speculate
    engine = make_engine(block_size=4, num_kv_blocks=160, max_model_len=512, speculative=spec)
    bm = engine.block_manager
    params = [
        SamplingParams(max_tokens=40, temperature=1.0, seed=i, ignore_eos=True) for i in range(3)
    ]
    prompts = [free_prompt, copy_prompt, free_prompt]
    for i, (p, sp) in enumerate(zip(prompts, params)):
        engine.add_request(str(i), p, sp)
    outs: dict[str, list[int]] = {}
    while engine.has_unfinished():
        for o in engine.step():
            outs.setdefault(o.request_id, []).extend(o.new_token_ids)
        for seq in engine.scheduler.running:
            if seq.num_computed_tokens == seq.num_tokens - 1:  # decoding: nothing held past it
                assert len(seq.block_table) <= bm.blocks_needed(seq.num_tokens)
    stats = engine.stats().spec
    assert stats is not None and stats.num_draft_tokens - stats.num_accepted_tokens > 20
    assert bm.num_free_blocks == bm.num_blocks and not any(bm.pool.ref_counts)
    # every cached block's hash is one of the real sequences' (prompt + emitted tokens)
    real: set[bytes] = set()
    for i, p in enumerate(prompts):
        whole = Sequence("x", p + outs[str(i)], SamplingParams(), 0)
        real.update(bm.chain(whole, whole.num_tokens // bm.block_size))
    assert bm.pool.cached and set(bm.pool.cached) <= real


def test_recomputed_generated_tokens_after_preemption_keep_greedy_output(
    pair: dict[str, LLMEngine], make_engine: Callable[..., LLMEngine], tokenizer: Any
) -> None:
    """A preempted sequence's recompute chunks mix prompt and generated tokens; the generated
    ones attend on the decode kernel as when they were decoded or verified as drafts."""
    prompts = [chat(tokenizer, "Name three colours."), chat(tokenizer, "Count to twenty.")]
    requests = [(str(i), p, greedy(64, ignore_eos=True)) for i, p in enumerate(prompts)]
    ref = run(pair["off"], requests, join_after=2)
    small = {"max_model_len": 128, "max_num_batched_tokens": 32, "speculative": NGRAM}
    tight = make_engine(**small, num_kv_blocks=9)  # 144 tokens: both cannot run to the end
    got = run(tight, requests, join_after=2)
    assert tight.stats().num_preemptions > 0
    for rid in ref:
        assert tokens(got[rid]) == tokens(ref[rid]), rid


def test_acceptance_metrics_follow_the_engine_counters(
    pair: dict[str, LLMEngine], copy_prompt: list[int]
) -> None:
    engine = pair["on"]
    metrics = EngineMetrics("m", "r0", engine.max_model_len, num_speculative_tokens=K)
    metrics.observe_step(engine.stats())  # whatever earlier tests counted
    start = engine.stats().spec
    run(engine, [("x", copy_prompt, greedy(24))])
    metrics.observe_step(engine.stats())
    now = engine.stats().spec
    assert start is not None and now is not None
    found = {
        (s.name, s.labels.get("position")): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
        if s.name.startswith("vllm:spec_decode")
    }
    assert found[("vllm:spec_decode_num_drafts_total", None)] == now.num_drafts
    assert found[("vllm:spec_decode_num_draft_tokens_total", None)] == now.num_draft_tokens
    assert found[("vllm:spec_decode_num_accepted_tokens_total", None)] == now.num_accepted_tokens
    per_pos = [
        found[("vllm:spec_decode_num_accepted_tokens_per_pos_total", str(p))] for p in range(K)
    ]
    assert sum(per_pos) == now.num_accepted_tokens
    assert per_pos == sorted(per_pos, reverse=True)  # position j needs positions < j kept
    assert now.num_accepted_tokens - start.num_accepted_tokens > 0
    plain = EngineMetrics("m", "r0", engine.max_model_len).exposition().decode()
    assert "spec_decode" not in plain


# ---- graph mode --------------------------------------------------------------------------------


@pytest.mark.skipif(
    not any(shutil.which(c) for c in CPP_COMPILERS), reason="no C++ compiler for torch.compile"
)
def test_graph_mode_runs_draft_verification_as_decode_graphs(tmp_path: Path) -> None:
    """A step of D generated tokens (drafts included) replays the graph of the smallest size
    >= D, without recompiling; larger ones run eager; greedy output is transformers'."""
    path = make_tiny_checkpoint("llama", tmp_path / "llama", real_vocab=False)
    config = EngineConfig(
        dtype="float32", num_kv_blocks=64, block_size=8, max_model_len=128,
        enable_prefix_caching=False, enforce_eager=False, graph_batch_sizes=[1, 8],
        speculative={**NGRAM, "prompt_lookup_min": 1, "min_acceptance_rate": 0.0},
    )  # fmt: skip
    torch._dynamo.reset()
    engine = LLMEngine(str(path), config)
    assert wait_for_decode_graphs(engine.executor, [1, 8], 600)  # compiled in the background
    runner = engine.executor.runner  # type: ignore[attr-defined]
    replays: list[int] = []
    compiled = runner.graph_decoder

    def counted(*args: Any, **kwargs: Any) -> Any:
        replays.append(kwargs["input_ids"].shape[1])
        return compiled(*args, **kwargs)

    runner.graph_decoder = counted
    batches = record_batches(engine)
    prompts = [[(7 * i + 3) % SMALL_VOCAB for i in range(n)] * 2 for n in (5, 9)]
    out: dict[str, list[int]] = {}
    replayed_drafts = eager_drafts = 0
    torch._dynamo.config.error_on_recompile = True
    try:
        for i, p in enumerate(prompts):
            engine.add_request(str(i), p, greedy(40, ignore_eos=True))
        while engine.has_unfinished():
            before = len(replays)
            step(engine, out)
            if any(s.draft_token_ids for s in batches[-1].scheduled):
                if len(replays) > before:
                    replayed_drafts += 1
                    assert batches[-1].num_tokens <= 8 and replays[-1] == 8
                else:
                    eager_drafts += 1
    finally:
        torch._dynamo.config.error_on_recompile = False
    assert replayed_drafts > 0, "no step with a draft replayed a graph"
    assert eager_drafts > 0, "no step with drafts of more than 8 tokens ran eager"
    hf = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    for i, p in enumerate(prompts):
        assert_same_until_tie(out[str(i)], hf_greedy(hf, p, 40), p, hf)
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    engine.shutdown()
