"""The one place where errors become OpenAI errors: status, type, code and the JSON/SSE body.

Routing errors (`router.policy` exceptions, saturated or unavailable models, a bad API key) get
their HTTP status here; the Python API returns the same `ErrorResponse` objects that HTTP
serialises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.responses import JSONResponse

from deployments.protocol.errors import ENGINE_ERROR, ErrorResponse, OpenAIError
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


def saturated_error(detail: str, retry_after_s: int) -> OpenAIError:
    """429: every candidate model is at its queue limit (sent with `Retry-After`)."""
    return OpenAIError(
        f"every model that can serve this request is at its queue limit, retry later: {detail}",
        status_code=429,
        code="rate_limit_exceeded",
        retry_after_s=retry_after_s,
    )


def unavailable_error(detail: str) -> OpenAIError:
    """503: no candidate model answered (down, failed or timed out)."""
    return OpenAIError(
        f"no model that can serve this request answered: {detail}",
        status_code=503,
        code="model_unavailable",
    )


def unauthorized() -> OpenAIError:
    """401: no configured key in `Authorization: Bearer <key>` or `x-api-key`."""
    return OpenAIError(
        "missing or invalid API key: send the header 'Authorization: Bearer <key>' "
        "(or 'x-api-key: <key>')",
        status_code=401,
        code="invalid_api_key",
    )


def mid_stream_error(model: str, detail: str) -> ErrorResponse:
    """A model stream that failed after its first item, as its final item (no fallback is
    possible once tokens have gone to the client)."""
    return OpenAIError(
        f"model {model} failed mid-stream: {detail}", status_code=500, code=ENGINE_ERROR
    ).response()


def not_found(path: str) -> OpenAIError:
    """404 for a route that does not exist."""
    return OpenAIError(
        f"no route {path}: the API serves POST /v1/chat/completions, POST /v1/completions, "
        "POST /v1/messages, POST /v1/messages/count_tokens, POST /v1/responses, "
        "GET|DELETE /v1/responses/{id}, POST /tokenize, POST /detokenize, GET /v1/models, "
        "GET /v1/models/{model}, GET /metrics and GET /health",
        status_code=404,
        code="not_found",
    )


def method_not_allowed(method: str, path: str) -> OpenAIError:
    """405 for a known route called with the wrong HTTP method."""
    return OpenAIError(
        f"{path} does not accept {method}", status_code=405, code="method_not_allowed"
    )


def error_json(
    err: ErrorResponse | OpenAIError,
    headers: dict[str, str] | None = None,
    body: Callable[[ErrorResponse], dict[str, Any]] = ErrorResponse.body,
    response_class: type[JSONResponse] = JSONResponse,
) -> JSONResponse:
    """An HTTP response with the error's status (and `Retry-After` for a 429).

    Args:
        err: the error.
        headers: more headers (the decision headers of a routed request).
        body: its JSON body: OpenAI's `{"error": {message, type, param, code}}` by default, or
            another API's shape (`router.apis.edge.ApiEdge.error_body`).
        response_class: the JSON response class (`router.apis.http.EdgeJSONResponse` for bodies
            that may echo lone surrogates).
    """
    resp = err.response() if isinstance(err, OpenAIError) else err
    if resp.retry_after_s is not None:
        headers = {**(headers or {}), "retry-after": str(resp.retry_after_s)}
    return response_class(body(resp), status_code=resp.status_code, headers=headers)
