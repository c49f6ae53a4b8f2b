"""Per-key and per-tenant rate limits of the router (`args.rate_limits`).

Example (YAML)::

    rate_limits:
      per_key: {requests_per_minute: 600}        # every API key, each with its own budget
      per_tenant: {tokens_per_minute: 200000}    # every `x-ascend-router-tenant` value
      keys:
        batch-jobs: {api_key: sk-batch-1, requests_per_minute: 30}
      tenants:
        acme: {requests_per_minute: 120, tokens_per_minute: 60000}

A request is charged to its key's budget (its entry under `keys`, else `per_key`) and to its
tenant's (`tenants`, else `per_tenant`); over either, it is answered 429 with `Retry-After`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from configs.named_keys import key_names

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class Budget(BaseModel):
    """Requests and tokens one key or tenant may use per minute (a token bucket each)."""

    model_config = _FROZEN

    requests_per_minute: int | None = Field(
        None, gt=0, description="Requests per minute; bursts up to this many at once."
    )
    tokens_per_minute: int | None = Field(
        None,
        gt=0,
        description="Tokens per minute, charged when a request is admitted as its estimated "
        "prompt tokens plus its completion limit (`max_completion_tokens`/`max_tokens`, 0 when "
        "not sent), as OpenAI counts its TPM limits.",
    )

    @model_validator(mode="after")
    def _some_limit(self) -> Budget:
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ValueError("a rate limit needs requests_per_minute or tokens_per_minute")
        return self


class KeyBudget(Budget):
    """A budget of one named API key."""

    api_key: str = Field(
        min_length=1, description="The key (one of `api_keys`); the entry's name labels it."
    )


class RateLimits(BaseModel):
    """Rate limits per API key and per tenant; unset means unlimited."""

    model_config = _FROZEN

    per_key: Budget | None = Field(
        None, description="Budget of every API key that has no entry under `keys`."
    )
    per_tenant: Budget | None = Field(
        None, description="Budget of every tenant that has no entry under `tenants`."
    )
    keys: dict[str, KeyBudget] = Field(
        default_factory=dict,
        description="Name -> budget of one API key; the name (never the key) appears in 429 "
        "messages and metrics.",
    )
    tenants: dict[str, Budget] = Field(
        default_factory=dict, description="`x-ascend-router-tenant` value -> its budget."
    )

    @model_validator(mode="after")
    def _distinct_keys(self) -> RateLimits:
        key_names(self.keys, "rate_limits.keys")
        return self
