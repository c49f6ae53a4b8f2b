"""The id of the request being served: Ray Serve's `X-Request-ID`.

Ray Serve's HTTP proxy takes the client's `X-Request-ID` header or generates one, echoes it on
the response, and carries it in the request context of every handle call the request makes, so
the router and the model replica see the same id (`ray.serve.context`, `_RequestContext`).
"""

from __future__ import annotations

import uuid

from ray.serve.context import _get_serve_request_context


def current_request_id() -> str:
    """The `X-Request-ID` of the request this task serves; a fresh id outside Serve requests
    (e.g. a Python caller's handle call with no HTTP request behind it, or a unit test)."""
    rid = _get_serve_request_context().request_id
    return rid or uuid.uuid4().hex
