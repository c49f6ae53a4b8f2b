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
    scheme, _, token = (authorization or "").partition(" ")
    presented = token.strip().encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(presented, key.encode())
    return scheme.lower() == "bearer" and bool(presented) and matched
