"""OpenAI error objects and the exception that carries one.

Body format from the OpenAI API reference ("Error codes"):
`{"error": {"message": str, "type": str, "param": str | null, "code": str | null}}`.
"""

from __future__ import annotations

from pydantic import BaseModel

INTERNAL_ERROR = "internal_error"
"""500: an unexpected failure while serving this one request (a bug, logged with its traceback
under the request id). It says nothing of the replica's health, and is not retried elsewhere."""

ENGINE_ERROR = "engine_error"
"""500: the engine failed the step that carried this request before its first token (a forward
pass that raised). The router may try another model; the replica's health is unchanged."""

REPLICA_BUSY = "replica_busy"
"""429: the replica had no preparation thread free for this request within its bound
(`deployments.handlers.preparation`): load, not the request's fault. The router tries the next
candidate, else answers 429 with `Retry-After`."""

ENGINE_UNAVAILABLE = "engine_unavailable"
"""503: the replica's engine loop is not running (a replica fault): the router marks the model
down and tries another; Ray Serve replaces the replica after its health check fails."""


class ErrorDetail(BaseModel):
    """The inner error object."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """An error as returned over HTTP; `status_code` and `retry_after_s` (the `Retry-After`
    header of a 429) are not part of the body."""

    error: ErrorDetail
    status_code: int = 400
    retry_after_s: int | None = None

    def body(self) -> dict[str, object]:
        """The JSON body (without the HTTP status)."""
        return {"error": self.error.model_dump()}


class OpenAIError(Exception):
    """A request that cannot be served, with its HTTP status and OpenAI error fields.

    Args:
        message: what is wrong and how to fix it.
        status_code: HTTP status (4xx for client errors).
        param: the request field at fault, e.g. `messages` or `max_tokens`.
        code: machine-readable code, e.g. `model_not_found`, `context_length_exceeded`.
        type: OpenAI error type; derived from `status_code` when omitted.
        retry_after_s: seconds for a `Retry-After` header (a 429 that can be retried).
    """

    def __init__(
        self,
        message: str,
        status_code: int = 400,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,  # noqa: A002 - OpenAI's field name
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.param = param
        self.code = code
        self.type = type or _type_for(status_code)
        self.retry_after_s = retry_after_s

    def response(self) -> ErrorResponse:
        """This error as a response object."""
        detail = ErrorDetail(message=str(self), type=self.type, param=self.param, code=self.code)
        return ErrorResponse(
            error=detail, status_code=self.status_code, retry_after_s=self.retry_after_s
        )


def internal_error(request_id: str, where: str) -> OpenAIError:
    """The opaque 500 for an unexpected exception: the client gets the request id, never the
    exception (its traceback goes to the server log under that id).

    Args:
        request_id: The request's `X-Request-ID`.
        where: Which component failed, e.g. `the router`, `model smollm2-long`.
    """
    return OpenAIError(
        f"internal error in {where} while serving request {request_id}; the server log has "
        "the details under this id",
        status_code=500,
        code=INTERNAL_ERROR,
    )


def engine_unavailable(reason: str) -> OpenAIError:
    """The 503 `ENGINE_UNAVAILABLE` for a request to a replica whose engine loop is not running.

    Args:
        reason: Why, as the engine says it (e.g. `the engine loop died`).
    """
    return OpenAIError(
        f"this model's engine is not running ({reason}); its replica is being replaced",
        status_code=503,
        code=ENGINE_UNAVAILABLE,
    )


def _type_for(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 404:
        return "invalid_request_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error" if status != 503 else "service_unavailable_error"
    return "invalid_request_error"
