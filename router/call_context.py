"""Who one model call is for, beyond its request body: what admission and replica choice read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel


@dataclass(frozen=True)
class CallContext:
    """The caller-side facts of one routed request.

    Attributes:
        tenant: The `x-ascend-router-tenant` header, if any (fair queueing is per tenant).
        priority: The engine priority the request runs at (vLLM's convention: a lower value
            runs first; 0 by default).
        session: The session-affinity key (`routing.session_key` in the model's config), if
            the request carries one: requests with the same key go to the same replica while it
            is healthy and not saturated (`router.replica_router`).
        timing: The request asked for per-token timestamps (`x-ascend-router-timing: 1`,
            `deployments.streaming.token_timing`).
    """

    tenant: str | None = None
    priority: int = 0
    session: str | None = None
    timing: bool = False


DEFAULT_CONTEXT = CallContext()
"""No tenant, priority 0, no session."""


def session_of(
    sources: Sequence[str], request: BaseModel, headers: Mapping[str, str]
) -> str | None:
    """A request's session key: the first non-empty of `sources` (the router's `session_key`:
    `header:<name>`, or a body field such as `prompt_cache_key` or `user`), else None."""
    for source in sources:
        kind, _, name = source.partition(":")
        value = headers.get(name.lower()) if kind == "header" else getattr(request, source, None)
        if isinstance(value, str) and value:
            return value
    return None
