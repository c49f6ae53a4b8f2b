"""What a sequence remembers about its own speculation (kept on `engine.sequence.Sequence`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

EMA_WEIGHT = 0.3
"""Weight of the newest verification in the moving average of the acceptance rate."""
MIN_ATTEMPTS = 4
"""Verified drafts before a low average may turn speculation off."""


@dataclass(eq=False)
class SpecState:
    """One sequence's speculation state.

    Attributes:
        enabled: False once its acceptance fell below the threshold (for good).
        attempts: drafts verified so far.
        acceptance_ema: exponential moving average of accepted / proposed draft tokens
            (weight `EMA_WEIGHT` on the newest); 1.0 before the first verification.
        tokens: int64 mirror of the sequence's tokens for the n-gram search (the first
            `num_mirrored` entries are valid; grown by doubling).
        num_mirrored: how many of the sequence's tokens `tokens` holds.
    """

    enabled: bool = True
    attempts: int = 0
    acceptance_ema: float = 1.0
    tokens: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    num_mirrored: int = 0

    def mirror(self, token_ids: list[int]) -> np.ndarray:
        """`token_ids` as an int64 array, copying only the tokens added since the last call
        (a sequence only grows).

        Returns:
            A `[len(token_ids)]` view of `tokens`.
        """
        n = len(token_ids)
        if n > len(self.tokens):
            grown = np.empty(max(n, 2 * len(self.tokens), 64), dtype=np.int64)
            grown[: self.num_mirrored] = self.tokens[: self.num_mirrored]
            self.tokens = grown
        if n > self.num_mirrored:
            self.tokens[self.num_mirrored : n] = token_ids[self.num_mirrored :]
            self.num_mirrored = n
        return self.tokens[:n]

    def record(self, num_drafted: int, num_accepted: int, min_rate: float) -> None:
        """Fold one verification into the average; turn speculation off when the average is
        below `min_rate` after `MIN_ATTEMPTS` verifications."""
        rate = num_accepted / num_drafted
        first = self.attempts == 0
        self.acceptance_ema = (
            rate if first else (EMA_WEIGHT * rate + (1 - EMA_WEIGHT) * self.acceptance_ema)
        )
        self.attempts += 1
        if self.attempts >= MIN_ATTEMPTS and self.acceptance_ema < min_rate:
            self.enabled = False
