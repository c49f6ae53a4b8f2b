"""Prompt lookup: draft tokens copied from an earlier occurrence of the sequence's last n-gram.

Semantics of vLLM's `NgramProposer` (`vllm/v1/spec_decode/ngram_proposer.py`), after "prompt
lookup decoding" (Saxena, 2023): among n in `[min_n, max_n]`, the longest n whose final n-gram
`tokens[-n:]` occurs earlier in `tokens` (an occurrence that ends before the last token, so at
least one token follows it) wins, and of its occurrences the earliest; the draft is the up to
k tokens that follow it. The search is a few vectorised comparisons over the token array: one
per n-gram length, and a single one when the last token never occurred before (no draft, no
further cost).
"""

from __future__ import annotations

import numpy as np

from engine.spec_decode.speculator import StepView


def propose_ngram(tokens: np.ndarray, min_n: int, max_n: int, k: int) -> list[int]:
    """Draft tokens for a sequence whose tokens (prompt then output) are `tokens`.

    Args:
        tokens: `[L]` int64 token ids.
        min_n: shortest n-gram that may match (>= 1).
        max_n: longest n-gram tried (>= min_n).
        k: most draft tokens returned.

    Returns:
        Up to `k` token ids (fewer when the match is near the end of `tokens`); empty when no
        n-gram of at least `min_n` tokens recurs, or `k <= 0`.
    """
    length = len(tokens)
    if k <= 0 or length <= min_n:
        return []
    history = tokens[:-1]  # an occurrence must end here, so a token follows it
    # ends[e]: the last n tokens equal tokens[e - n + 1 : e + 1], for the n reached so far
    ends = history == tokens[-1]
    best_end = -1
    n = 1
    while True:
        hits = np.flatnonzero(ends)
        if not len(hits):
            break
        if n >= min_n:
            best_end = int(hits[0])  # earliest occurrence of the longest n so far
        if n == max_n or n == length - 1:
            break
        # extend every match by one token to the left: tokens[e - n] == tokens[-1 - n]
        ends[:n] = False
        ends[n:] &= history[: length - 1 - n] == tokens[-1 - n]
        n += 1
    if best_end < 0:
        return []
    return tokens[best_end + 1 : best_end + 1 + k].tolist()


class NgramProposer:
    """`propose_ngram` over each wanting sequence's tokens (`speculative: {method: ngram}`).

    Args:
        min_n: `prompt_lookup_min`.
        max_n: `prompt_lookup_max`.
    """

    needs_hidden = False

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n = min_n
        self.max_n = max_n

    def propose(self, view: StepView, wanted: dict[int, int]) -> dict[int, list[int]]:
        """See `engine.spec_decode.speculator.Proposer`."""
        drafts = {}
        for i, k in wanted.items():
            seq = view.seqs[i]
            assert seq.spec is not None, "the speculator sets the state first"
            tokens = seq.spec.mirror(seq.token_ids())
            drafts[i] = propose_ngram(tokens, self.min_n, self.max_n, k)
        return drafts
