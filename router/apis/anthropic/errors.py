"""Errors in Anthropic's shape: `{"type": "error", "error": {"type": T, "message": M}}`.

The types by HTTP status follow Anthropic's API reference ("Errors") within the `ErrorType`
values the `anthropic` SDK lists (`types/shared/error_type.py`): it has no
`request_too_large`, so a 413 is an `invalid_request_error` here; a 504 is its `timeout_error`.
"""

from __future__ import annotations

from typing import Any

from deployments.protocol.errors import ErrorResponse

_BY_STATUS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(error: ErrorResponse) -> dict[str, Any]:
    """An error as Anthropic's JSON body (the HTTP status stays `error.status_code`)."""
    return {
        "type": "error",
        "error": {"type": error_type(error.status_code), "message": error.error.message},
    }
