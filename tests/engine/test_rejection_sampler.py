"""Speculative verification (`engine.spec_decode.rejection`): the emitted tokens follow the
target distribution (chi-square over many samples, Leviathan et al. 2023 / Chen et al. 2023),
a seeded request consumes its generator as the plain sampler does, greedy keeps exactly the
draft's agreeing prefix, and a verification row counts the draft tokens before it in its
penalties."""

from __future__ import annotations

import torch

from engine.sampler import sample
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence
from engine.spec_decode.rejection import rejection_sample, verify

CHI2_DF4_P001 = 18.467
"""Chi-square critical value, 4 degrees of freedom, significance 0.001."""
TARGET = torch.tensor(
    [
        [0.10, 0.40, 0.20, 0.25, 0.05],  # draft position 0 (draft token 1)
        [0.30, 0.10, 0.10, 0.40, 0.10],  # draft position 1 (draft token 3)
        [0.05, 0.05, 0.50, 0.20, 0.20],  # bonus position
    ]
)
DRAFT = [1, 3]


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def draw(n: int, generator: torch.Generator | None) -> list[list[int]]:
    return [rejection_sample(TARGET, DRAFT, generator) for _ in range(n)]


def check_distribution(runs: list[list[int]]) -> None:
    """Position j's token, among runs that kept draft tokens 0..j-1, follows row j."""
    for j in range(len(DRAFT) + 1):
        reached = [r[j] for r in runs if r[:j] == DRAFT[:j]]
        assert len(reached) > 800, f"only {len(reached)} runs reached position {j}"
        counts = torch.bincount(torch.tensor(reached), minlength=5).float()
        stat = chi_square(counts, TARGET[j])
        assert stat < CHI2_DF4_P001, f"position {j}: chi-square {stat:.1f}, counts {counts}"
    # acceptance of the first draft token is p(d): 0.40
    accepted = sum(r[0] == DRAFT[0] for r in runs) / len(runs)
    assert abs(accepted - 0.40) < 0.02


def test_emitted_tokens_follow_the_target_distribution() -> None:
    torch.manual_seed(0)
    check_distribution(draw(12000, None))


def test_seeded_draws_follow_the_target_distribution_too() -> None:
    check_distribution(draw(12000, torch.Generator().manual_seed(1)))


def test_a_rejection_emits_every_other_token_in_proportion() -> None:
    """Given a rejection at position 0, the token follows p with the draft token removed."""
    torch.manual_seed(2)
    runs = draw(12000, None)
    rejected = torch.tensor([r[0] for r in runs if r[0] != DRAFT[0]])
    counts = torch.bincount(rejected, minlength=5).float()
    assert counts[DRAFT[0]] == 0
    residual = TARGET[0].clone()
    residual[DRAFT[0]] = 0
    keep = torch.tensor([0, 2, 3, 4])
    stat = chi_square(counts[keep], (residual / residual.sum())[keep])
    assert stat < 16.266, f"chi-square {stat:.1f} (3 degrees of freedom, p = 0.001)"


def test_a_seeded_request_consumes_one_draw_per_emitted_token() -> None:
    """The emitted tokens are those the plain sampler draws, token after token, from the same
    generator, and the generator ends in the same state."""
    for seed in range(40):
        spec = torch.Generator().manual_seed(seed)
        emitted = rejection_sample(TARGET, DRAFT, spec)
        plain = torch.Generator().manual_seed(seed)
        for j, token in enumerate(emitted):
            race = TARGET[j] / torch.empty(5).exponential_(generator=plain)
            assert int(race.argmax()) == token
        assert torch.equal(spec.get_state(), plain.get_state())


def make_seq(**kw) -> Sequence:
    s = Sequence("r", [1, 2], SamplingParams(**kw), 0)
    if s.params.seed is not None:
        s.generator = torch.Generator().manual_seed(s.params.seed)
    return s


def test_greedy_keeps_the_agreeing_prefix_and_adds_the_target_token() -> None:
    logits = torch.full((4, 6), -5.0)
    logits[0, 3] = logits[1, 4] = logits[2, 1] = logits[3, 2] = 5.0  # argmax 3, 4, 1, 2
    v = verify(logits.clone(), make_seq(temperature=0.0, logprobs=1), [3, 4, 5])
    assert v.token_ids == [3, 4, 1] and v.num_accepted == 2
    assert v.logprobs is not None and [e.token_id for e in v.logprobs] == [3, 4, 1]
    expected = torch.log_softmax(logits[2], -1)[1].item()
    assert abs(v.logprobs[2].logprob - expected) < 1e-6
    everything = verify(logits.clone(), make_seq(temperature=0.0), [3, 4, 1])
    assert everything.token_ids == [3, 4, 1, 2] and everything.num_accepted == 3


def test_seeded_verification_emits_what_the_plain_sampler_would() -> None:
    torch.manual_seed(3)
    logits = torch.randn(4, 50)
    for seed in range(10):
        draft = [int(logits[j].argmax()) for j in range(3)]  # likely kept
        spec = verify(logits.clone(), make_seq(temperature=0.7, seed=seed), draft)
        plain_seq = make_seq(temperature=0.7, seed=seed)
        plain = [
            sample(logits[j : j + 1].clone(), [plain_seq]).token_ids[0]
            for j in range(len(spec.token_ids))
        ]
        assert spec.token_ids == plain


def test_penalties_count_the_draft_tokens_before_each_row() -> None:
    logits = torch.zeros(3, 5)
    logits[:, 2] = 1.0
    logits[:, 4] = 0.5
    # row 1 follows draft token 2: a frequency penalty of 2 makes 4 the argmax there
    v = verify(logits, make_seq(temperature=0.0, frequency_penalty=2.0), [2, 2])
    assert v.token_ids == [2, 4]
