"""Token-level constraints (constrained decoding) as the sampler sees them.

A constraint masks the logits of one sequence before sampling and is told which token was
chosen. The grammar-backed implementation uses xgrammar (Dong et al., 2024, "XGrammar: Flexible
and Efficient Structured Generation Engine for Large Language Models"); its matcher is stateful,
so each sequence owns one. Chosen over llguidance and outlines-core by measured per-token cost on
this CPU (mask + accept for a JSON schema over SmolLM2's 49,152-token vocabulary: xgrammar
~0.13 ms/token, llguidance ~5 ms/token).
"""

from __future__ import annotations

from typing import Protocol

import torch
import xgrammar as xgr


class TokenConstraint(Protocol):
    """Per-sequence constraint on which tokens may come next."""

    def mask_logits(self, logits: torch.Tensor) -> None:
        """Set disallowed entries of `logits` (`[1, vocab_size]` float32) to -inf in place."""

    def accept(self, token_id: int) -> None:
        """Advance past the chosen token."""

    def is_terminated(self) -> bool:
        """True when the grammar is complete (the sequence should stop)."""


class GrammarConstraint:
    """A `TokenConstraint` backed by an xgrammar `GrammarMatcher`.

    Args:
        compiled: a grammar compiled for the model's tokenizer (`xgr.CompiledGrammar`).
        vocab_size: logits width (the model's vocabulary, which may exceed the tokenizer's).
    """

    def __init__(self, compiled: xgr.CompiledGrammar, vocab_size: int) -> None:
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def mask_logits(self, logits: torch.Tensor) -> None:
        """See `TokenConstraint.mask_logits`."""
        self._matcher.fill_next_token_bitmask(self._bitmask)
        xgr.apply_token_bitmask_inplace(logits, self._bitmask.to(logits.device))

    def accept(self, token_id: int) -> None:
        """See `TokenConstraint.accept`.

        Raises:
            AssertionError: the token violates the grammar (the mask makes this impossible).
        """
        accepted = self._matcher.accept_token(token_id)
        assert accepted, f"token {token_id} rejected by the grammar after masking"

    def is_terminated(self) -> bool:
        """See `TokenConstraint.is_terminated`."""
        return self._matcher.is_terminated()
