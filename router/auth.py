"""Optional API keys: `Authorization: Bearer <key>` checked in constant time.

Keys come from the router config's `api_keys` or `ASCEND_ROUTER_API_KEYS` (merged by
`router.app.build_app`); with none configured, every request is accepted. Keys are never logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence


def authorized(authorization: str | None, keys: Sequence[str]) -> bool:
    """Whether an `Authorization` header value carries one of `keys` (always, with no keys).

    Every key is compared, each with `hmac.compare_digest`, so the time taken does not tell
    which key (or how much of one) matched.
    """
    if not keys:
        return True
    presented = (bearer_key(authorization) or "").encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(presented, key.encode())
    return bool(presented) and matched


def bearer_key(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer <key>` header value; None for any other value."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
