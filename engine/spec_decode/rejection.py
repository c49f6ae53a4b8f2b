"""Verification of draft tokens: which of them the target model keeps, and the token after.

Speculative sampling (Leviathan et al., 2023, "Fast Inference from Transformers via
Speculative Decoding"; Chen et al., 2023, "Accelerating Large Language Model Decoding with
Speculative Sampling"): at draft position j the draft token `d` is kept with probability
`min(1, p(d) / q(d))`, and on rejection a token is drawn from `normalize(max(0, p - q))`; the
emitted tokens are then distributed exactly as if the target `p` had sampled them one by one.
A prompt-lookup draft is a point mass (`q(d) = 1`), so `d` is kept with probability `p(d)` and a
rejection draws from `p` with `d` removed. Drawing `t ~ p` and keeping `d` iff `t == d` does
both at once (`P(t = d) = p(d)`, and given `t != d`, `t` follows `p` without `d`), so this is
how positions are verified: with the sampler's own draw (the exponential race `argmax(p / E)`,
`E ~ Exp(1)`, one vector per position, from the request's seeded generator when it has one).
A seeded request then consumes its generator exactly as without speculation (one vector per
emitted token) and emits the same tokens; greedy rows keep a draft token iff it is the argmax.
After k kept drafts the target's sample at the last position is the bonus token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.outputs import TokenLogprob
from engine.sampler import logprob_entries, process_row, sampling_probs, unseeded_generator
from engine.sequence import Sequence


@dataclass(frozen=True)
class Verified:
    """The outcome of verifying one sequence's draft.

    Attributes:
        token_ids: the tokens to emit, in order: the kept draft tokens, then the target's
            token at the first rejected position (or the bonus token); 1 to k + 1 of them.
        num_accepted: draft tokens kept (`len(token_ids) - 1`).
        logprobs: per emitted token, its logprob and top alternatives under the target's
            processed distribution (as the sampler reports them), when the request asked.
    """

    token_ids: list[int]
    num_accepted: int
    logprobs: list[TokenLogprob] | None


def rejection_sample(
    probs: torch.Tensor, draft: list[int], generator: torch.Generator | None = None
) -> list[int]:
    """Speculative sampling of a point-mass draft.

    Args:
        probs: `[k + 1, vocab_size]` float32 target probabilities; row j is the distribution
            of the token at draft position j (row k: the bonus position).
        draft: the k draft token ids.
        generator: the request's CPU generator (seeded requests): one `Exp(1)` vector is drawn
            per emitted token, lazily. None: the engine's unseeded generator, all k + 1 vectors
            at once.

    Returns:
        The emitted tokens: `draft[:a]` and the target's token at position `a` (`a` = draft
        tokens kept).
    """
    k = len(draft)
    assert probs.shape[0] == k + 1, f"{probs.shape[0]} probability rows for {k} draft tokens"
    if generator is None:
        race = probs / torch.empty_like(probs).exponential_(
            generator=unseeded_generator(probs.device)
        )
        targets = race.argmax(dim=-1).tolist()
        kept = _num_kept(targets, draft)
        return [*draft[:kept], targets[kept]]
    for j in range(k + 1):
        race = probs[j] / torch.empty(probs.shape[-1]).exponential_(generator=generator).to(
            probs.device
        )
        token = int(race.argmax())
        if j == k or token != draft[j]:
            return [*draft[:j], token]
    raise AssertionError("unreachable: the bonus position always returns")


def verify(logits: torch.Tensor, seq: Sequence, draft: list[int]) -> Verified:
    """Verify `draft` against the target's logits at the k + 1 positions of `seq`'s step.

    Row j is processed like the sampler processes a row (logit bias, penalties counting the
    outputs plus `draft[:j]`), then greedy rows keep the draft's agreeing prefix with the
    argmax, sampled rows go through `rejection_sample` (temperature, top-k, top-p applied).

    Args:
        logits: `[k + 1, vocab_size]` float32, row j = logits after the step's token j (the
            last known token, then each draft token); modified in place.
        seq: the speculating sequence (no grammar constraint: those never speculate).
        draft: its k draft token ids.

    Raises:
        Exception: whatever this request's own processing raised (its logit bias, say); the
            engine fails that request alone.
    """
    p = seq.params
    assert p.constraint is None, f"request {seq.request_id} with a grammar speculated"
    history = list(seq.output_token_ids)
    for j in range(len(draft) + 1):
        process_row(logits, j, seq, history)
        if j < len(draft):
            history.append(draft[j])
    if p.greedy:
        targets = logits.argmax(dim=-1).tolist()
        kept = _num_kept(targets, draft)
        tokens = [*draft[:kept], targets[kept]]
    else:
        tokens = rejection_sample(sampling_probs(logits, [p] * len(logits)), draft, seq.generator)
    entries = None
    if p.logprobs is not None:
        rows = logits[: len(tokens)].log_softmax(dim=-1)
        chosen = torch.tensor(tokens, device=logits.device)
        entries = [
            TokenLogprob(t, lp, tuple(top[: p.logprobs]))
            for t, (lp, top) in zip(tokens, logprob_entries(rows, chosen, p.logprobs))
        ]
    return Verified(tokens, len(tokens) - 1, entries)


def _num_kept(targets: list[int], draft: list[int]) -> int:
    """Length of the longest prefix of `draft` equal to `targets`."""
    kept = 0
    while kept < len(draft) and targets[kept] == draft[kept]:
        kept += 1
    return kept
