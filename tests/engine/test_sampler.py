"""Sampler semantics: greedy, seeded reproducibility, top-k / top-p masks, bias, penalties."""

from __future__ import annotations

import torch

from engine.sampler import _top_k_top_p, sample
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence


def seq(arrival: int = 0, **kw) -> Sequence:
    s = Sequence(f"r{arrival}", [1, 2], SamplingParams(**kw), arrival)
    if s.params.seed is not None:
        s.generator = torch.Generator().manual_seed(s.params.seed)
    return s


def test_greedy_is_argmax_and_logprobs_are_log_softmax() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    result = sample(logits.clone(), [seq(temperature=0.0, logprobs=2)])
    tokens, lps = result.token_ids, result.logprobs
    assert tokens == [1] and result.failed == {}
    expected = torch.log_softmax(logits, -1)[0]
    assert abs(lps[0].logprob - expected[1].item()) < 1e-6
    assert [t for t, _ in lps[0].top] == [1, 3]


def test_seeded_rows_reproduce_whatever_the_batch() -> None:
    logits = torch.randn(1, 1000)
    alone = [sample(logits.clone(), [seq(seed=42)]).token_ids[0] for _ in range(1)]
    s = seq(seed=42)
    batch = torch.cat([torch.randn(3, 1000), logits])
    mixed = sample(batch, [seq(1), seq(2), seq(3), s]).token_ids[3]
    assert mixed == alone[0]


def test_top_k_and_top_p_masks() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = _top_k_top_p(logits.clone(), torch.tensor([2]), torch.tensor([1.0])).isfinite()
    assert kept.tolist() == [[True, True, False, False]]
    kept = _top_k_top_p(logits.clone(), torch.tensor([0]), torch.tensor([0.7])).isfinite()
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7 so the 2nd is needed
    kept = _top_k_top_p(logits.clone(), torch.tensor([0]), torch.tensor([0.0])).isfinite()
    assert kept.tolist() == [[True, False, False, False]]  # top_p 0 keeps the best token


def test_sampling_only_draws_from_the_allowed_set() -> None:
    logits = torch.zeros(1, 50)
    s = seq(temperature=1.0, top_k=3, seed=1)
    logits[0, [5, 9, 11]] = 5.0
    draws = {sample(logits.clone(), [s]).token_ids[0] for _ in range(50)}
    assert draws <= {5, 9, 11} and len(draws) > 1


def test_logit_bias_and_penalties() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    assert sample(logits.clone(), [seq(temperature=0.0, logit_bias={0: -100.0})]).token_ids == [1]
    s = seq(temperature=0.0, frequency_penalty=2.0)
    s.output_token_ids = [0, 0]
    assert sample(logits.clone(), [s]).token_ids == [1]


class _BrokenGrammar:
    """A constraint whose mask (or accept) raises, as a faulty grammar would."""

    def __init__(self, fail_in: str) -> None:
        self.fail_in = fail_in

    def mask_logits(self, logits: torch.Tensor) -> None:
        if self.fail_in == "mask":
            raise RuntimeError("grammar broke")

    def accept(self, token_id: int) -> None:
        if self.fail_in == "accept":
            raise RuntimeError("grammar broke")

    def is_terminated(self) -> bool:
        return False


def test_one_requests_fault_fails_that_row_alone() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 1.0, 0.0], [0.0, 0.0, 5.0], [1.0, 0.0, 0.0]])
    rows = [
        seq(0, temperature=0.0),
        seq(1, temperature=0.0, constraint=_BrokenGrammar("mask")),
        seq(2, temperature=0.0, constraint=_BrokenGrammar("accept")),
        seq(3, temperature=0.0, logit_bias={7: 1.0}),  # an id outside the vocabulary
    ]
    result = sample(logits.clone(), rows)
    assert set(result.failed) == {1, 2, 3}
    assert result.token_ids[0] == 1
