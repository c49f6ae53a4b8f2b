"""Turns logits into tokens for the whole batch at once.

Order of processing (as in vLLM's sampler): logit bias, presence/frequency penalties (OpenAI
API reference, "Parameter details"), logprobs of the processed distribution, then temperature,
top-k and top-p (Holtzman et al., 2019) for sampled rows. Sampling uses the exponential race
(`argmax(p / q)`, `q ~ Exp(1)`), which draws from `p` and lets seeded rows use their own RNG.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from engine.outputs import TokenLogprob
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

logger = logging.getLogger(__name__)

_UNSEEDED: dict[torch.device, torch.Generator] = {}


def unseeded_generator(device: torch.device) -> torch.Generator:
    """The engine's own generator for requests without a seed, one per device, started from
    torch's initial seed (as torch's default generator is: a fresh replica draws the same
    sequence every run, as it did when it drew from the default generator).

    Not torch's global RNG: dynamo restores the global RNG state when a compile ends
    (`torch._dynamo.convert_frame.preserve_global_state`), so while decode graphs compile in
    the background (`engine.graph_capture`) draws from it would repeat earlier ones.
    """
    generator = _UNSEEDED.get(device)
    if generator is None:
        generator = torch.Generator(device=device).manual_seed(torch.initial_seed())
        _UNSEEDED[device] = generator
    return generator


def process_row(
    logits: torch.Tensor, i: int, seq: Sequence, outputs: list[int] | None = None
) -> None:
    """This sequence's own logit processing of row `i` of `logits` (`[N, vocab_size]`
    float32, in place): logit bias, presence/frequency penalties, grammar mask.

    Args:
        outputs: the generated tokens the penalties count (default `seq.output_token_ids`;
            a speculative verification row counts the draft tokens before it as well).
    """
    p = seq.params
    outputs = seq.output_token_ids if outputs is None else outputs
    if p.logit_bias:
        ids = torch.tensor(list(p.logit_bias), device=logits.device)
        logits[i, ids] += torch.tensor(list(p.logit_bias.values()), device=logits.device)
    if (p.presence_penalty or p.frequency_penalty) and outputs:
        out = torch.tensor(outputs, device=logits.device)
        counts = torch.bincount(out, minlength=logits.shape[-1]).to(logits.dtype)
        logits[i] -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0)
    if p.constraint is not None:
        p.constraint.mask_logits(logits[i : i + 1])


def _fail(failed: dict[int, str], i: int, seq: Sequence, exc: Exception) -> None:
    logger.exception("request %s failed in the sampler", seq.request_id)
    failed[i] = f"{type(exc).__name__} in the sampler"


def _top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) tokens outside each row's top-k and top-p sets; keeps the best token."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    vocab = logits.shape[-1]
    ranks = torch.arange(vocab, device=logits.device)[None, :]
    k = torch.where(top_k > 0, top_k, vocab)[:, None]
    drop = ranks >= k
    probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass strictly before each token
    drop |= (before >= top_p[:, None]) & (ranks > 0)
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def sampling_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """The distribution sampled rows draw from: temperature, then top-k and top-p.

    Args:
        logits: `[N, vocab_size]` float32 processed logits (`process_row`), one row per
            entry of `params`.

    Returns:
        `[N, vocab_size]` float32 probabilities (rows sum to 1).
    """
    temps = torch.tensor([max(p.temperature, 1e-5) for p in params], device=logits.device)
    scaled = logits / temps[:, None]
    top_k = torch.tensor([p.top_k for p in params], device=logits.device)
    top_p = torch.tensor([p.top_p for p in params], device=logits.device)
    if bool((top_k > 0).any() or (top_p < 1.0).any()):
        scaled = _top_k_top_p(scaled, top_k, top_p)
    return scaled.softmax(dim=-1)


def logprob_entries(
    logprobs: torch.Tensor, chosen: torch.Tensor, num_top: int
) -> list[tuple[float, list[tuple[int, float]]]]:
    """Per row: the chosen token's logprob and the `num_top` (at least 1) most likely
    `(token_id, logprob)` pairs.

    Args:
        logprobs: `[N, vocab_size]` float32 log-probabilities.
        chosen: `[N]` int64 chosen token ids.
    """
    top_vals, top_ids = logprobs.topk(max(num_top, 1), dim=-1)
    chosen_lp = logprobs.gather(-1, chosen[:, None])[:, 0].tolist()
    top = [list(zip(i, v)) for i, v in zip(top_ids.tolist(), top_vals.tolist())]
    return list(zip(chosen_lp, top))


@dataclass(frozen=True)
class SampleResult:
    """What `sample` chose.

    Attributes:
        token_ids: one token per row (meaningless for a failed row).
        logprobs: per row, a `TokenLogprob` when the request asked for logprobs, else None.
        failed: row -> what failed in that request's own processing (its logit bias,
            penalties or grammar); those requests end, the other rows are unaffected.
    """

    token_ids: list[int]
    logprobs: list[TokenLogprob | None]
    failed: dict[int, str]


def sample(logits: torch.Tensor, seqs: list[Sequence]) -> SampleResult:
    """Pick one token per row.

    A failure in one request's own processing (its logit bias, penalties or grammar) fails
    that row alone: it is reported in `failed`, and the other rows are sampled as usual.

    Args:
        logits: `[N, vocab_size]` float32, one row per sequence in `seqs` (modified in place).
        seqs: the sequences being sampled, in row order.
    """
    failed: dict[int, str] = {}
    for i, seq in enumerate(seqs):
        try:
            process_row(logits, i, seq)
        except Exception as exc:  # this request's fault: the batch goes on without it
            _fail(failed, i, seq, exc)
            logits[i] = 0.0
    params = [s.params for s in seqs]
    greedy = torch.tensor([p.greedy for p in params], device=logits.device)
    chosen = logits.argmax(dim=-1)
    if not bool(greedy.all()):
        probs = sampling_probs(logits, params)
        q = torch.empty_like(probs).exponential_(generator=unseeded_generator(probs.device))
        for i, seq in enumerate(seqs):
            if seq.generator is not None and not params[i].greedy:
                q[i] = torch.empty(probs.shape[-1]).exponential_(generator=seq.generator)
        chosen = torch.where(greedy, chosen, (probs / q).argmax(dim=-1))
    token_ids = chosen.tolist()
    for i, (seq, token) in enumerate(zip(seqs, token_ids)):
        if seq.params.constraint is not None and i not in failed:
            try:
                seq.params.constraint.accept(token)
            except Exception as exc:  # this request's fault: the batch goes on without it
                _fail(failed, i, seq, exc)
    want = [p.logprobs for p in params]
    entries: list[TokenLogprob | None] = [None] * len(seqs)
    if any(w is not None for w in want):
        lp = logits.log_softmax(dim=-1)
        num_top = max(w or 0 for w in want)
        for i, (chosen_lp, top) in enumerate(logprob_entries(lp, chosen, num_top)):
            if want[i] is not None:
                entries[i] = TokenLogprob(token_ids[i], chosen_lp, tuple(top[: want[i]]))
    return SampleResult(token_ids, entries, failed)


def prompt_logprobs(logits: torch.Tensor, next_ids: list[int], num_top: int) -> list[TokenLogprob]:
    """Logprobs of prompt tokens from the logits of the positions before them.

    Args:
        logits: `[P, vocab_size]` float32, row `j` = logits at prompt position `j`.
        next_ids: the prompt token at position `j + 1` for each row.
        num_top: alternatives to keep per token.
    """
    lp = logits.log_softmax(dim=-1)
    chosen = torch.tensor(next_ids, device=logits.device)
    return [
        TokenLogprob(tid, clp, tuple(top[:num_top]))
        for tid, (clp, top) in zip(next_ids, logprob_entries(lp, chosen, num_top))
    ]
