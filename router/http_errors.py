"""The one place where errors become OpenAI errors: status, type, code and the JSON/SSE body.

Routing errors (`router.policy` exceptions, saturated or unavailable models, a bad API key) get
their HTTP status here; the Python API returns the same `ErrorResponse` objects that HTTP
serialises.
"""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse

from deployments.protocol.errors import ErrorResponse, OpenAIError
from router.policy import NoHealthyModel, NoModelCanServe, PolicyError, UnknownModel

_CONTEXT_PARAMS = ("messages", "prompt", "max_tokens")


def policy_error(exc: PolicyError | NoHealthyModel) -> OpenAIError:
    """A routing decision that failed: unknown model 404, nothing can serve 400, none up 503."""
    if isinstance(exc, UnknownModel):
        return OpenAIError(str(exc), status_code=404, param=exc.param, code="model_not_found")
    if isinstance(exc, NoHealthyModel):
        return OpenAIError(str(exc), status_code=503, param=exc.param, code="model_unavailable")
    if isinstance(exc, NoModelCanServe) and exc.param in _CONTEXT_PARAMS:
        return OpenAIError(str(exc), param=exc.param, code="context_length_exceeded")
    return OpenAIError(str(exc), param=exc.param)


def saturated_error(detail: str) -> OpenAIError:
    """429: every candidate model is at its queue limit (send with `Retry-After`)."""
    return OpenAIError(
        f"every model that can serve this request is at its queue limit, retry later: {detail}",
        status_code=429,
        code="rate_limit_exceeded",
    )


def unavailable_error(detail: str) -> OpenAIError:
    """503: no candidate model answered (down, failed or timed out)."""
    return OpenAIError(
        f"no model that can serve this request answered: {detail}",
        status_code=503,
        code="model_unavailable",
    )


def unauthorized() -> OpenAIError:
    """401: the `Authorization: Bearer <key>` header is missing or names no configured key."""
    return OpenAIError(
        "missing or invalid API key: send the header 'Authorization: Bearer <key>'",
        status_code=401,
        code="invalid_api_key",
    )


def internal_error(exc: Exception) -> OpenAIError:
    """500 for a failure of the router itself."""
    return OpenAIError(f"internal error in the router: {exc!r}", status_code=500)


def mid_stream_error(exc: Exception) -> ErrorResponse:
    """A model stream that failed after its first item, as its final item."""
    return OpenAIError(f"the model server failed mid-stream: {exc!r}", status_code=500).response()


def error_json(
    err: ErrorResponse | OpenAIError, headers: dict[str, str] | None = None
) -> JSONResponse:
    """An HTTP response `{"error": {message, type, param, code}}` with the error's status."""
    resp = err.response() if isinstance(err, OpenAIError) else err
    return JSONResponse(resp.body(), status_code=resp.status_code, headers=headers)


def error_sse(err: ErrorResponse) -> str:
    """An error that happens after streaming started, as one SSE event."""
    return f"data: {json.dumps(err.body())}\n\n"
