"""Prompt lookup (`engine.spec_decode.ngram`, vLLM's n-gram semantics), the per-sequence
acceptance average that turns speculation off, and the speculator's limits (max_tokens,
grammar)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from pydantic import ValidationError

from configs.engine_config import EngineConfig
from configs.speculative_config import SpeculativeConfig
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence
from engine.spec_decode.ngram import NgramProposer, propose_ngram
from engine.spec_decode.speculator import Speculator, StepView
from engine.spec_decode.state import MIN_ATTEMPTS, SpecState
from engine.step_input import StepInput


def propose(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    return propose_ngram(np.array(tokens, dtype=np.int64), min_n, max_n, k)


def oracle(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """Brute force: longest n first, earliest occurrence that a token follows."""
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        suffix = tokens[-n:]
        for p in range(len(tokens) - n):
            if tokens[p : p + n] == suffix:
                return tokens[p + n : p + n + k]
    return []


@pytest.mark.parametrize(
    ("tokens", "min_n", "max_n", "k", "draft"),
    [
        ([1, 2, 3, 4, 1, 2, 3], 2, 3, 2, [4, 1]),
        ([2, 3, 8, 1, 2, 3, 9, 1, 2, 3], 1, 3, 3, [9, 1, 2]),  # the longest n-gram wins
        ([1, 2, 5, 1, 2, 6, 1, 2], 2, 3, 1, [5]),  # of equal ones, the earliest
        ([7, 1, 9, 1], 2, 3, 2, []),  # no earlier bigram "9 1"
        ([7, 1, 9, 1], 1, 3, 2, [9, 1]),
        ([1, 2, 3, 1, 2], 2, 2, 5, [3, 1, 2]),  # fewer than k follow the match
        ([4, 4, 4, 4], 1, 3, 3, [4]),  # overlapping occurrence
        ([5], 1, 3, 2, []),
        ([1, 2, 1, 2], 1, 2, 0, []),
    ],
)
def test_prompt_lookup_cases(
    tokens: list[int], min_n: int, max_n: int, k: int, draft: list[int]
) -> None:
    assert propose(tokens, min_n, max_n, k) == draft


def test_prompt_lookup_equals_brute_force() -> None:
    rng = random.Random(0)
    for _ in range(600):
        tokens = [rng.randrange(4) for _ in range(rng.randrange(1, 60))]
        min_n = rng.randrange(1, 4)
        max_n = rng.randrange(min_n, 6)
        k = rng.randrange(1, 6)
        assert propose(tokens, min_n, max_n, k) == oracle(tokens, min_n, max_n, k), tokens


def test_low_acceptance_turns_speculation_off_after_a_few_attempts() -> None:
    state = SpecState()
    for _ in range(MIN_ATTEMPTS - 1):
        state.record(4, 0, 0.2)
    assert state.enabled, "too early to give up"
    state.record(4, 0, 0.2)
    assert not state.enabled
    good = SpecState()
    for _ in range(20):
        good.record(4, 3, 0.2)
    assert good.enabled and good.acceptance_ema == pytest.approx(0.75)


def test_mirror_copies_only_new_tokens() -> None:
    state = SpecState()
    tokens = list(range(100))
    assert state.mirror(tokens[:70]).tolist() == tokens[:70]
    assert state.mirror(tokens).tolist() == tokens and len(state.tokens) >= 100


def make_speculator(k: int = 4, **kw) -> Speculator:
    cfg = SpeculativeConfig(method="ngram", num_speculative_tokens=k, **kw)
    proposer = NgramProposer(cfg.prompt_lookup_min, cfg.prompt_lookup_max)
    return Speculator(cfg, max_model_len=64, proposer=proposer)


def draft_for(spec: Speculator, seq: Sequence) -> None:
    """The speculator's turn after a step in which `seq` sampled a token."""
    no_step = StepInput([], [], [], [], [], [])
    spec.after_step(StepView(no_step, [seq]), [0])


def test_drafts_never_reach_past_max_tokens_or_the_context() -> None:
    spec = make_speculator(prompt_lookup_min=1)
    prompt = [1, 2, 3, 4, 5, 6, 7, 1, 2]
    for max_tokens, expected in [(1, 0), (2, 1), (3, 2), (10, 4)]:
        seq = Sequence("r", prompt, SamplingParams(max_tokens=max_tokens), 0)
        draft_for(spec, seq)
        assert len(seq.draft_token_ids) == expected, max_tokens  # the step adds one more
    long = Sequence("r", [1, 2, 3] * 20 + [1, 2], SamplingParams(max_tokens=100), 0)
    draft_for(spec, long)  # 62 tokens of 64: one draft token, then the target's own
    assert long.draft_token_ids == [3]


def test_grammar_requests_and_switched_off_sequences_get_no_draft() -> None:
    spec = make_speculator(prompt_lookup_min=1)

    class AnyToken:
        def mask_logits(self, logits: object) -> None: ...
        def accept(self, token_id: int) -> None: ...
        def is_terminated(self) -> bool:
            return False

    constrained = Sequence("g", [1, 2, 1], SamplingParams(constraint=AnyToken()), 0)
    draft_for(spec, constrained)
    assert constrained.draft_token_ids == []
    off = Sequence("o", [1, 2, 1], SamplingParams(), 0)
    off.spec = SpecState(enabled=False)
    draft_for(spec, off)
    assert off.draft_token_ids == []


def test_counters_per_position() -> None:
    spec = make_speculator(k=3, prompt_lookup_min=1)
    seq = Sequence("r", [1, 2, 1], SamplingParams(max_tokens=10), 0)
    draft_for(spec, seq)
    spec.record(seq, 3, 2)
    spec.record(seq, 3, 0)
    spec.record(seq, 2, 2)
    stats = spec.stats()
    assert (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens) == (3, 8, 4)
    assert stats.num_accepted_tokens_per_pos == (2, 2, 0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"method": "draft", "num_speculative_tokens": 2}, "needs `model`"),
        (
            {"method": "mtp", "num_speculative_tokens": 2, "model": {"path": "/x"}},
            "takes none",
        ),
        ({"method": "eagle", "num_speculative_tokens": 2}, "'ngram', 'draft' or 'mtp'"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "greater than 0"),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4,
             "prompt_lookup_max": 3},
            "prompt_lookup_min",
        ),
        ({"method": "ngram", "num_speculative_tokens": 2, "k": 3}, "Extra inputs"),
    ],
)  # fmt: skip
def test_config_refuses_inconsistent_settings(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EngineConfig(speculative=fields)


def test_config_accepts_ngram() -> None:
    cfg = EngineConfig(speculative={"method": "ngram", "num_speculative_tokens": 4})
    assert cfg.speculative is not None and cfg.speculative.num_speculative_tokens == 4
