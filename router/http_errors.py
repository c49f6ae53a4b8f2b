"""The one place where errors become OpenAI error JSON over HTTP."""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse

from deployments.protocol.errors import ErrorResponse, OpenAIError


def error_json(err: ErrorResponse | OpenAIError, headers: dict[str, str] | None = None) -> JSONResponse:
    """An HTTP response `{"error": {message, type, param, code}}` with the error's status."""
    resp = err.response() if isinstance(err, OpenAIError) else err
    return JSONResponse(resp.body(), status_code=resp.status_code, headers=headers)


def error_sse(err: ErrorResponse) -> str:
    """An error that happens after streaming started, as one SSE event."""
    return f"data: {json.dumps(err.body())}\n\n"
