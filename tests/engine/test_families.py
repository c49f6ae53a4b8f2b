"""Every family's tiny checkpoint: the engine's greedy tokens equal transformers' `generate`.

One continuous batch per family (two requests join mid-run) with a 16-token step budget, so
prompts are prefilled in chunks across steps; fp32; near-ties handled as in
`test_greedy_equals_transformers`. DeepSeek-V4's reference is transformers' uncached full
forward (`engine_helpers.hf_greedy_uncached`); `test_deepseek_v4` goes further for it.
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
    hf_reference,
    run_to_completion,
    step,
)
from transformers import AutoModelForCausalLM

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from fixtures.tiny_checkpoints import FAMILY_CONFIGS, SMALL_VOCAB, make_tiny_checkpoint

PROMPT_LENGTHS = (5, 12, 23, 31)
MAX_TOKENS = 12


def _prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, SMALL_VOCAB) for _ in range(n)] for n in PROMPT_LENGTHS]


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIGS))
def test_continuous_batch_matches_generate(family: str, tmp_path: Path) -> None:
    path = make_tiny_checkpoint(family, tmp_path / family, real_vocab=False, seed=1)
    engine = LLMEngine(
        str(path),
        EngineConfig(
            dtype="float32",
            num_kv_blocks=64,
            block_size=16 if family == "deepseek_v4" else 8,  # V4: whole ratio-16 windows
            max_num_batched_tokens=16,
            max_model_len=256,
        ),
    )
    prompts = _prompts(seed=len(family))
    ours: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, greedy(MAX_TOKENS))
        if i in (1, 2):  # requests 2 and 3 join a batch that is already running
            step(engine, ours)
    run_to_completion(engine, ours)
    assert_blocks_free(engine)
    engine.shutdown()

    attention = "eager" if family == "deepseek_v4" else "sdpa"  # V4 ships eager only
    hf = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation=attention
    ).eval()
    for i, p in enumerate(prompts):
        assert_same_until_tie(ours[str(i)], hf_reference(hf, p, MAX_TOKENS), p, hf)
