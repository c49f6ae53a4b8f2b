"""DeepSeek-V4 on the hybrid paged cache: greedy tokens equal transformers' full forward (fp32,
the brief's tie rule) through continuous batching, chunked prefill split inside compression
windows, prompts many windows longer than the sliding window, prefix-cache hits at several
block boundaries and forced preemption; the KV the cache holds equals the geometry formula, and
every block of both pools is free afterwards.

The tiny checkpoint (`fixtures.tiny_checkpoints.FAMILY_CONFIGS["deepseek_v4"]`): window 8, one
sliding-only layer, two ratio-4 layers whose indexer keeps 2 entries (so it really selects past
8 tokens), one ratio-16 layer, hash-routed MoE in the first two layers. The reference is
transformers' uncached forward over the whole sequence per token.

Why not transformers' cached `generate`: with a tiny config whose indexer has 2 heads (issue 25's
try), whole-prompt, 7- and 16-token chunks and 1-token steps differ by up to 0.04 in the logits.
transformers' cached path is not wrong: the indexer's score `sum_h w_h relu(q_h . k)` is exactly
0 for an entry whose every head's dot product is negative, and 0 is the best score when the head
weights are negative; 12 queries of a 60-token prompt then tie exactly at the top-k boundary, and
`torch.topk` breaks exact ties by an order that depends on the scored tensor's length (how many
entries the call sees): `torch.tensor([-4e-5, 0, -2e-3, 0, 0, 0]).topk(2)` keeps entries 1 and 5,
not 1 and 3. With 8 indexer heads (ties at odds 2**-8 per entry, this checkpoint) the same
splits agree to 2e-7, and so does our paged cache.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from engine_helpers import (
    assert_blocks_free,
    assert_same_until_tie,
    greedy,
    hf_greedy_uncached,
    run_staggered,
    run_to_completion,
)
from transformers import AutoModelForCausalLM

from configs.engine_config import EngineConfig
from engine.deepseek_v4.cache import HybridKVSpec
from engine.hybrid_block_manager import HybridBlockManager
from engine.llm_engine import LLMEngine
from fixtures.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint

BLOCK = 16
MAX_TOKENS = 10


@pytest.fixture(scope="module")
def v4_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(
        "deepseek_v4", tmp_path_factory.mktemp("v4") / "tiny", real_vocab=False, seed=3
    )


@pytest.fixture(scope="module")
def reference(v4_path: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(v4_path, dtype=torch.float32).eval()


def _engine(path: Path, **kw: int | bool) -> LLMEngine:
    fields: dict[str, int | bool] = {
        "num_kv_blocks": 64,
        "max_num_batched_tokens": 256,
        "max_num_seqs": 8,
        "max_model_len": 512,
    }
    fields.update(kw)
    return LLMEngine(
        str(path),
        EngineConfig(dtype="float32", block_size=BLOCK, **fields),  # type: ignore[arg-type]
    )


def _prompts(seed: int, lengths: tuple[int, ...]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, SMALL_VOCAB) for _ in range(n)] for n in lengths]


def _check(ours: dict[str, list[int]], prompts: list[list[int]], ref: torch.nn.Module) -> None:
    for i, p in enumerate(prompts):
        want = hf_greedy_uncached(ref, p, MAX_TOKENS)
        assert_same_until_tie(ours[str(i)], want, p, ref)


@pytest.mark.parametrize("chunk", [256, 7], ids=["whole-prompts", "chunks-of-7"])
def test_continuous_batch_matches_full_forward(
    v4_path: Path, reference: torch.nn.Module, chunk: int
) -> None:
    # 70 and 97 tokens: 8-12 raw windows, 17-24 ratio-4 entries (the indexer keeps 2), 4-6
    # ratio-16 entries; 7-token chunks end inside windows of both ratios; requests join mid-run
    prompts = _prompts(1, (5, 23, 70, 97))
    engine = _engine(v4_path, max_num_batched_tokens=chunk)
    ours = run_staggered(
        engine, [(str(i), p, greedy(MAX_TOKENS)) for i, p in enumerate(prompts)], join_every=2
    )
    engine.shutdown()
    _check(ours, prompts, reference)


def test_prefix_hits_at_several_boundaries_give_the_same_tokens(
    v4_path: Path, reference: torch.nn.Module
) -> None:
    base = _prompts(2, (90,))[0]
    # the same 90 tokens cut at 3 block boundaries (16, 48, 80), each with a new tail
    tails = _prompts(3, (5, 9, 4))
    prompts = [base, *(base[:cut] + tail for cut, tail in zip((16, 48, 80), tails))]
    engine = _engine(v4_path)
    bm = engine.block_manager
    assert isinstance(bm, HybridBlockManager)
    ours: dict[str, list[int]] = {}
    engine.add_request("0", prompts[0], greedy(MAX_TOKENS))
    run_to_completion(engine, ours)
    for i, p in enumerate(prompts[1:], start=1):
        hits = bm.stats.hits
        engine.add_request(str(i), p, greedy(MAX_TOKENS))
        run_to_completion(engine, ours)
        cut = (16, 48, 80)[i - 1]
        assert bm.stats.hits - hits == cut // BLOCK, f"prompt {i}: expected a {cut}-token hit"
    assert_blocks_free(engine)
    engine.shutdown()
    _check(ours, prompts, reference)


def test_a_hit_needs_the_sliding_blocks_of_its_boundary(v4_path: Path) -> None:
    # with the sliding pool exhausted by other prompts, the old prefix's sliding blocks are
    # evicted: the hit is cut back to what both pools still hold (here: nothing)
    engine = _engine(v4_path, max_num_seqs=1, max_num_batched_tokens=32)
    bm = engine.block_manager
    assert isinstance(bm, HybridBlockManager)
    first, *others = _prompts(4, (64, 64, 64, 64, 64, 64, 64, 64, 64))
    engine.add_request("first", first, greedy(1))
    run_to_completion(engine)
    for i, p in enumerate(others):
        engine.add_request(str(i), p, greedy(1))
        run_to_completion(engine)
    engine.add_request("again", first + [7, 8, 9], greedy(1))
    seq = engine._seqs["again"]
    digests = bm.chain(seq, len(first) // BLOCK)
    assert all(d in bm.pool.cached for d in digests)  # the full pool still holds the prefix
    assert not any(d in bm.sliding.cached for d in digests[-1:])  # its last window is gone
    hits = bm.stats.hits
    engine.step()
    assert bm.stats.hits == hits and seq.num_computed_tokens == 32  # no hit: one 32-token chunk
    run_to_completion(engine)
    assert_blocks_free(engine)
    engine.shutdown()


def test_forced_preemption_recomputes_to_the_same_tokens(
    v4_path: Path, reference: torch.nn.Module
) -> None:
    prompts = _prompts(5, (40, 52, 61))
    # 11 full blocks: the three sequences need 12 at the end, so the newest is preempted
    engine = _engine(v4_path, num_kv_blocks=11, max_num_batched_tokens=24, max_model_len=160)
    ours = run_staggered(
        engine, [(str(i), p, greedy(MAX_TOKENS)) for i, p in enumerate(prompts)], join_every=1
    )
    assert engine.scheduler.num_preemptions > 0
    engine.shutdown()
    _check(ours, prompts, reference)


def test_kv_held_equals_the_geometry_formula(v4_path: Path) -> None:
    engine = _engine(v4_path, max_num_batched_tokens=32)
    spec = HybridKVSpec.from_config(engine.hf_config, torch.float32)
    cfg = engine.hf_config
    # per token: two ratio-4 layers x (16 + 16) x 4 B / 4 + one ratio-16 layer x 16 x 4 B / 16
    assert spec.bytes_per_token() == 2 * (cfg.head_dim + cfg.index_head_dim) * 4 / 4 + 16 * 4 / 16
    bm = engine.block_manager
    assert isinstance(bm, HybridBlockManager)
    full_bytes = spec.bytes_per_block(BLOCK)
    sliding_bytes = spec.sliding_bytes_per_block(BLOCK)
    engine.add_request("0", _prompts(6, (150,))[0], greedy(30))
    seq = engine._seqs["0"]
    held_sliding = []
    while engine.has_unfinished():
        engine.step()
        if engine.has_unfinished():
            n = seq.num_computed_tokens
            live = [b for b in seq.sliding_table if b >= 0]
            held = len(seq.block_table) * full_bytes + len(live) * sliding_bytes
            assert held == spec.bytes_per_sequence(n, BLOCK) or len(seq.block_table) > -(
                -n // BLOCK
            )
            held_sliding.append(len(live))
    # the window moved on: blocks came back while the sequence ran
    assert max(held_sliding) <= spec.sliding_blocks_per_sequence(BLOCK) + 2
    assert_blocks_free(engine)
    engine.shutdown()


def test_block_size_must_hold_whole_windows(v4_path: Path) -> None:
    with pytest.raises(ValueError, match="not a multiple of DeepSeek-V4's compress ratio 16"):
        LLMEngine(
            str(v4_path),
            EngineConfig(dtype="float32", block_size=8, max_model_len=64, num_kv_blocks=16),
        )
