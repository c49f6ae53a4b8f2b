"""Optional API keys, presented as `Authorization: Bearer <key>` (OpenAI's clients) or
`x-api-key: <key>` (Anthropic's), checked in constant time.

Keys come from the router config's `api_keys` or `ASCEND_ROUTER_API_KEYS` (merged by
`router.app.build_app`); with none configured, every request is accepted. Keys are never logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence


def authorized(headers: Mapping[str, str], keys: Sequence[str]) -> bool:
    """Whether the request's headers carry one of `keys` (always, with no keys).

    Every key is compared, each with `hmac.compare_digest`, so the time taken does not tell
    which key (or how much of one) matched.
    """
    if not keys:
        return True
    presented = (presented_key(headers) or "").encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(presented, key.encode())
    return bool(presented) and matched


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request presents: `Authorization: Bearer <key>`, else `x-api-key`; None for
    neither (rate limits are charged per presented key)."""
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return (headers.get("x-api-key") or "").strip() or None
