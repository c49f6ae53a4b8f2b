"""Token-level constraints (constrained decoding) as the sampler sees them.

A constraint masks the logits of one sequence before sampling and is told which token was
chosen. The grammar-backed implementation uses xgrammar (Dong et al., 2024, "XGrammar: Flexible
and Efficient Structured Generation Engine for Large Language Models"); its matcher is stateful,
so each sequence owns one. Chosen over llguidance and outlines-core by measured per-token cost on
this CPU (mask + accept for a JSON schema over SmolLM2's 49,152-token vocabulary: xgrammar
~0.13 ms/token, llguidance ~5 ms/token).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
import xgrammar as xgr

from engine.wire import SharedText


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

    It pickles before its first token (a request on its way to an engine core process,
    `engine.core_process`) when built with `tokenizer_info`: as xgrammar's JSON forms of the
    compiled grammar (~46 KB, 2 ms, for a small schema over SmolLM2's vocabulary) and of the
    tokenizer info (~1.6 MB: sent once per connection as an `engine.wire.SharedText`, and
    deserialised once per receiving process).

    Args:
        compiled: a grammar compiled for the model's tokenizer (`xgr.CompiledGrammar`).
        vocab_size: logits width (the model's vocabulary, which may exceed the tokenizer's).
        tokenizer_info: returns `compiled.tokenizer_info.serialize_json()` as a `SharedText`
            (the caller caches it); None: the constraint does not pickle.
    """

    def __init__(
        self,
        compiled: xgr.CompiledGrammar,
        vocab_size: int,
        tokenizer_info: Callable[[], SharedText] | None = None,
    ) -> None:
        self._compiled = compiled
        self._vocab_size = vocab_size
        self._tokenizer_info = tokenizer_info
        self._started = False
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the JSON forms of the grammar and tokenizer info.

        Raises:
            TypeError: built without `tokenizer_info`, or past its first token (a matcher's
                state does not travel).
        """
        if self._tokenizer_info is None or self._started:
            raise TypeError("only an unstarted GrammarConstraint with tokenizer_info pickles")
        grammar_json = self._compiled.serialize_json()
        return (_constraint_from_json, (grammar_json, self._tokenizer_info(), self._vocab_size))

    def mask_logits(self, logits: torch.Tensor) -> None:
        """See `TokenConstraint.mask_logits`."""
        self._matcher.fill_next_token_bitmask(self._bitmask)
        xgr.apply_token_bitmask_inplace(logits, self._bitmask.to(logits.device))

    def accept(self, token_id: int) -> None:
        """See `TokenConstraint.accept`.

        Raises:
            AssertionError: the token violates the grammar (the mask makes this impossible).
        """
        self._started = True
        accepted = self._matcher.accept_token(token_id)
        assert accepted, f"token {token_id} rejected by the grammar after masking"

    def is_terminated(self) -> bool:
        """See `TokenConstraint.is_terminated`."""
        return self._matcher.is_terminated()


_TOKENIZER_INFOS: dict[str, xgr.TokenizerInfo] = {}  # digest -> info, in a receiving process


def _constraint_from_json(
    grammar_json: str, tokenizer_info: SharedText, vocab_size: int
) -> GrammarConstraint:
    """Unpickle a `GrammarConstraint` (see its `__reduce__`)."""
    info = _TOKENIZER_INFOS.get(tokenizer_info.digest)
    if info is None:
        info = xgr.TokenizerInfo.deserialize_json(tokenizer_info.text)
        _TOKENIZER_INFOS[tokenizer_info.digest] = info
    compiled = xgr.CompiledGrammar.deserialize_json(grammar_json, info)
    return GrammarConstraint(compiled, vocab_size, lambda: tokenizer_info)
