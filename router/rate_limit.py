"""Per-key and per-tenant rate limits: token buckets checked before routing.

Each budget (`configs.rate_limits.Budget`) is a token bucket per kind (requests, tokens) that
holds at most its per-minute figure and refills continuously at that figure per 60 seconds, so
a key may burst up to its minute's budget and then runs at the configured rate. A request is
admitted only when every bucket it is charged to has room (its key's and its tenant's), and
then charged to all of them; one tenant's or key's flood therefore empties only its own buckets.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from configs.named_keys import key_names
from configs.rate_limits import Budget, RateLimits
from deployments.protocol.errors import OpenAIError

LimitKind = Literal["requests", "tokens"]

_MAX_BUCKETS = 65_536
"""Buckets kept; tenant values are sent by clients, so the least recently used are dropped
beyond this (a dropped bucket starts full again: lenient, never unbounded memory), and
`per_tenant` buckets are keyed by a 16-byte digest of the value, so a long header costs no
more than a short one."""


class _Bucket:
    """A token bucket of `capacity` refilled at `capacity / 60` per second."""

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity = float(capacity)
        self.rate_per_s = capacity / 60.0
        self.level = float(capacity)
        self.stamp = now

    def wait_s(self, amount: float, now: float) -> float:
        """Seconds until `amount` is available (0: now); refills up to `now` first."""
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate_per_s)
        self.stamp = now
        return max(0.0, (min(amount, self.capacity) - self.level) / self.rate_per_s)

    def take(self, amount: float) -> None:
        self.level -= min(amount, self.capacity)


@dataclass(frozen=True)
class RateLimited:
    """A request refused by a rate limit.

    Attributes:
        limit: The limit's label: `key:<name>`, `per_key`, `tenant:<tenant>` or `per_tenant`.
        kind: Which bucket was empty.
        retry_after_s: Whole seconds until the request would be admitted (at least 1).
        per_minute: The limit's figure.
    """

    limit: str
    kind: LimitKind
    retry_after_s: int
    per_minute: int

    def error(self) -> OpenAIError:
        """The 429 answer (send with `Retry-After: retry_after_s`)."""
        return OpenAIError(
            f"rate limit {self.limit!r} exceeded: {self.per_minute} {self.kind} per minute; "
            f"retry after {self.retry_after_s} s",
            status_code=429,
            code="rate_limit_exceeded",
            retry_after_s=self.retry_after_s,
        )


class RateLimiter:
    """The router replica's rate limits (each router replica keeps its own buckets).

    Args:
        limits: The configured limits.
        clock: Monotonic seconds (tests pass a fake clock).
    """

    def __init__(self, limits: RateLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self._key_names = key_names(limits.keys, "rate_limits.keys")
        self._buckets: OrderedDict[tuple[str, str, LimitKind], _Bucket] = OrderedDict()

    def admit(self, api_key: str | None, tenant: str | None, tokens: int) -> RateLimited | None:
        """Charge one request to its budgets, or say which limit refuses it (nothing charged).

        Args:
            api_key: The bearer key presented, if any (it is never logged or labelled).
            tenant: The `x-ascend-router-tenant` header, if any.
            tokens: The request's token cost: estimated prompt tokens plus its completion
                limit. A cost above a bucket's capacity is charged as the whole capacity.

        Returns:
            None when admitted (and charged), else the first limit that refused it.
        """
        now = self.clock()
        charges: list[tuple[_Bucket, float]] = []
        for label, ident, budget in self._budgets(api_key, tenant):
            kinds: list[tuple[LimitKind, int | None, float]] = [
                ("requests", budget.requests_per_minute, 1.0),
                ("tokens", budget.tokens_per_minute, float(tokens)),
            ]
            for kind, per_minute, amount in kinds:
                if per_minute is None:
                    continue
                bucket = self._bucket((label, ident, kind), per_minute, now)
                wait = bucket.wait_s(amount, now)
                if wait > 0:
                    return RateLimited(label, kind, max(1, math.ceil(wait)), per_minute)
                charges.append((bucket, amount))
        for bucket, amount in charges:
            bucket.take(amount)
        return None

    def _budgets(self, api_key: str | None, tenant: str | None) -> list[tuple[str, str, Budget]]:
        """(label, bucket identity, budget) of each budget the request is charged to."""
        out: list[tuple[str, str, Budget]] = []
        limits = self.limits
        if api_key:
            name = self._key_names.get(api_key)
            if name is not None:
                out.append((f"key:{name}", name, limits.keys[name]))
            elif limits.per_key is not None:
                out.append(("per_key", api_key, limits.per_key))
        if tenant:
            if tenant in limits.tenants:
                out.append((f"tenant:{tenant}", tenant, limits.tenants[tenant]))
            elif limits.per_tenant is not None:  # clients choose tenants: key by a digest
                digest = hashlib.blake2b(tenant.encode(), digest_size=16).hexdigest()
                out.append(("per_tenant", digest, limits.per_tenant))
        return out

    def _bucket(self, ident: tuple[str, str, LimitKind], per_minute: int, now: float) -> _Bucket:
        bucket = self._buckets.get(ident)
        if bucket is None:
            bucket = self._buckets[ident] = _Bucket(per_minute, now)
            if len(self._buckets) > _MAX_BUCKETS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(ident)
        return bucket
