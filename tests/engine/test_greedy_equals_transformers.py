"""The engine's greedy tokens equal transformers' `generate` greedy tokens (fp32)."""

from __future__ import annotations

import pytest
import torch
from engine_helpers import assert_same_until_tie, greedy, hf_greedy, run_to_completion, step
from transformers import AutoModelForCausalLM

from engine.checkpoint_ref import CheckpointRef

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "List three colors.",
    "Explain what a KV cache is in two sentences.",
]


@pytest.fixture(scope="module")
def hf_model(smollm2_path: str) -> torch.nn.Module:
    ref = CheckpointRef.from_path(smollm2_path)
    return AutoModelForCausalLM.from_pretrained(
        ref.directory, dtype=torch.float32, attn_implementation="sdpa", **ref.kwargs()
    ).eval()


_REFERENCE: dict[tuple[int, ...], list[int]] = {}


def _reference(model: torch.nn.Module, prompt: list[int]) -> list[int]:
    key = tuple(prompt)
    if key not in _REFERENCE:
        _REFERENCE[key] = hf_greedy(model, prompt, 24)
    return _REFERENCE[key]


@pytest.mark.parametrize(
    ("budget", "weights"),
    [(2048, "none"), (16, "none"), (16, "int4")],
    ids=["whole-prefill", "chunked-prefill", "chunked-prefill-int4"],
)
def test_continuous_batch_matches_generate(
    make_engine, tokenizer, hf_model, budget: int, weights: str
) -> None:
    # int4: the SmolLM2 GGUF is Q4_1, which int4 group-32 weights hold exactly (the codes are
    # recovered from the dequantised weights), so transformers' fp32 model is the reference.
    engine = make_engine(max_num_batched_tokens=budget, block_size=16, weight_quantization=weights)
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
        )["input_ids"]
        for p in PROMPTS
    ]
    ours: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, greedy(24))
        if i == 1:  # later requests join a batch that is already running
            step(engine, ours)
    run_to_completion(engine, ours)
    for i, p in enumerate(prompts):
        assert_same_until_tie(ours[str(i)], _reference(hf_model, p), p, hf_model)
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def test_prefix_cache_hits_keep_greedy_equal(make_engine, tokenizer, hf_model) -> None:
    engine = make_engine(max_num_batched_tokens=64, block_size=8)
    system = {"role": "system", "content": "You are a terse assistant. " * 4}
    prompts = [
        tokenizer.apply_chat_template(
            [system, {"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
        )["input_ids"]
        for p in PROMPTS[:2]
    ]
    engine.add_request("warm", prompts[0], greedy(4))
    run_to_completion(engine)
    ours: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, greedy(16))
    run_to_completion(engine, ours)
    stats = engine.block_manager.stats
    assert stats.hits >= 2 * (len(prompts[0]) // 8 - 1), stats  # both reused the shared prefix
    for i, p in enumerate(prompts):
        ref = hf_greedy(hf_model, p, 16)
        assert_same_until_tie(ours[str(i)], ref, p, hf_model)
