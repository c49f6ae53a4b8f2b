"""Incremental, multi-byte-safe detokenisation.

Byte-level BPE spreads one CJK character or emoji over several tokens; decoding token by token
would emit U+FFFD. Following vLLM's `detokenize_incrementally`, each step decodes a short window
of recent tokens twice (with and without the newest) and emits the difference only once it no
longer ends in an incomplete character.
"""

from __future__ import annotations

from typing import Protocol

REPLACEMENT = "\ufffd"


class Decoder(Protocol):
    """The part of a tokenizer the detokenizer needs."""

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas.

    Args:
        tokenizer: anything with `decode(ids, skip_special_tokens=...)`.
        skip_special_tokens: drop special tokens (e.g. `<|im_end|>`) from the text.
        prefix_ids: tokens before the first generated one (the end of the prompt), so that
            the first generated token decodes with its correct leading space.
    """

    def __init__(
        self,
        tokenizer: Decoder,
        skip_special_tokens: bool = True,
        prefix_ids: list[int] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.ids: list[int] = list(prefix_ids or [])[-4:]
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip)

    def push(self, token_ids: tuple[int, ...] | list[int]) -> str:
        """Add generated tokens; return the text that is now complete (may be '')."""
        self.ids.extend(token_ids)
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        if len(full) > len(prefix) and not full.endswith(REPLACEMENT):
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return full[len(prefix) :]
        return ""

    def flush(self) -> str:
        """Text still held back at the end (an incomplete character decodes to U+FFFD)."""
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.ids)
        return full[len(prefix) :]
