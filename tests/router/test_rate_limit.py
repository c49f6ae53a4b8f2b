"""Rate limits per key and per tenant: token buckets on a fake clock."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from configs.rate_limits import Budget, KeyBudget, RateLimits
from router.rate_limit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def limiter(**limits: object) -> tuple[RateLimiter, Clock]:
    clock = Clock()
    return RateLimiter(RateLimits.model_validate(limits), clock), clock


def test_one_keys_flood_is_refused_while_another_key_is_served() -> None:
    rl, clock = limiter(per_key={"requests_per_minute": 3})
    assert [rl.admit("flood", None, 10) for _ in range(3)] == [None] * 3
    refused = rl.admit("flood", None, 10)
    assert refused is not None and refused.limit == "per_key" and refused.kind == "requests"
    assert refused.retry_after_s == 20  # one request refills in 60 / 3 s
    err = refused.error()
    assert err.status_code == 429 and err.retry_after_s == 20 and "'per_key'" in str(err)
    assert "flood" not in str(err), "the key itself is never shown"
    assert rl.admit("calm", None, 10) is None
    clock.now += 20
    assert rl.admit("flood", None, 10) is None and rl.admit("flood", None, 10) is not None


def test_tokens_per_minute_charges_prompt_and_completion_limit() -> None:
    rl, clock = limiter(tenants={"acme": {"tokens_per_minute": 1000}})
    assert rl.admit(None, "acme", 600) is None
    refused = rl.admit(None, "acme", 600)
    assert refused is not None and refused.limit == "tenant:acme" and refused.kind == "tokens"
    assert refused.retry_after_s == 12  # 200 tokens at 1000/60 per s
    assert rl.admit(None, "other", 10**6) is None, "no budget for other tenants"
    clock.now += 60
    assert rl.admit(None, "acme", 5000) is None, "a request above capacity takes the whole bucket"
    assert rl.admit(None, "acme", 1) is not None


def test_a_refused_request_charges_nothing() -> None:
    rl, _ = limiter(per_key={"requests_per_minute": 10}, per_tenant={"requests_per_minute": 1})
    assert rl.admit("k", "t", 1) is None
    for _ in range(5):
        assert rl.admit("k", "t", 1) is not None  # the tenant's bucket is empty
    assert [rl.admit("k", None, 1) for _ in range(9)] == [None] * 9, "the key kept 9"


def test_named_keys_have_their_own_budget() -> None:
    rl, _ = limiter(
        per_key={"requests_per_minute": 100},
        keys={"batch": {"api_key": "sk-batch", "requests_per_minute": 1}},
    )
    assert rl.admit("sk-batch", None, 1) is None
    refused = rl.admit("sk-batch", None, 1)
    assert refused is not None and refused.limit == "key:batch"


def test_config_errors() -> None:
    with pytest.raises(ValidationError, match="requests_per_minute or tokens_per_minute"):
        Budget()
    with pytest.raises(ValidationError, match="the same api_key"):
        RateLimits(
            keys={
                "a": KeyBudget(api_key="k", requests_per_minute=1),
                "b": KeyBudget(api_key="k", requests_per_minute=2),
            }
        )


def test_per_tenant_buckets_do_not_grow_with_the_header() -> None:
    rl, _ = limiter(per_tenant={"requests_per_minute": 1})
    long_tenant = "t" * 20_000
    assert rl.admit(None, long_tenant, 1) is None
    assert rl.admit(None, long_tenant, 1) is not None, "the same tenant shares one bucket"
    assert all(len(ident) <= 32 for _, ident, _ in rl._buckets), "keys are digests"
