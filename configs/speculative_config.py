"""Speculative decoding settings (the `speculative` section of a model's `engine` settings).

Only prompt lookup (`method: ngram`) exists: the draft tokens are what followed an earlier
occurrence of the sequence's last n-gram in its own prompt and output, as vLLM's n-gram
speculator proposes them. `draft` (a small draft model) and `mtp` (multi-token prediction
heads) are names the issue reserves; they are refused until they are implemented.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NOT_IMPLEMENTED_METHODS = ("draft", "mtp")


class SpeculativeConfig(BaseModel):
    """How a model replica speculates (see `engine.spec_decode`)."""

    model_config = ConfigDict(extra="forbid")

    method: str = Field(
        description="How draft tokens are proposed. `ngram`: prompt lookup (the tokens that "
        "followed the last earlier occurrence of the sequence's final n-gram, vLLM's "
        "`ngram`). `draft` and `mtp` are not implemented yet and are refused."
    )
    num_speculative_tokens: int = Field(
        gt=0,
        le=16,
        description="Draft tokens proposed per step (k); one forward pass verifies k + 1 "
        "positions of a speculating sequence.",
    )
    prompt_lookup_min: int = Field(2, ge=1, description="ngram: shortest n-gram matched (tokens).")
    prompt_lookup_max: int = Field(
        5,
        ge=1,
        description="ngram: longest n-gram matched (tokens); the longest n in "
        "[prompt_lookup_min, prompt_lookup_max] that matches wins, its earliest occurrence.",
    )
    min_acceptance_rate: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="A sequence stops speculating for good once the exponential moving "
        "average (weight 0.3 on the newest) of its accepted / proposed draft tokens falls "
        "below this after 4 verified drafts, so free generation never pays for draft tokens "
        "that keep being rejected. 0 never turns speculation off.",
    )

    @field_validator("method")
    @classmethod
    def _known_method(cls, method: str) -> str:
        if method in NOT_IMPLEMENTED_METHODS:
            raise ValueError(
                f"speculative method {method!r} is not implemented yet; use method: ngram"
            )
        if method != "ngram":
            raise ValueError(f"unknown speculative method {method!r}; use method: ngram")
        return method

    @model_validator(mode="after")
    def _lookup_range(self) -> SpeculativeConfig:
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(
                f"prompt_lookup_min ({self.prompt_lookup_min}) must be <= prompt_lookup_max "
                f"({self.prompt_lookup_max})"
            )
        return self
