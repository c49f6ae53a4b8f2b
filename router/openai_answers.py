"""The chat path's answers as HTTP and Python-API results: JSON, relayed SSE streams and OpenAI
errors, with the decision headers (`router.dispatch.Routed.headers`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from deployments.protocol.error_stream import end_on_failure, error_stream
from deployments.protocol.errors import ErrorResponse, OpenAIError
from deployments.protocol.sse import DONE, sse_event
from router.dispatch import Routed
from router.http_errors import error_json
from router.model_stream import ModelStream


async def _events(items: AsyncIterator[BaseModel | bytes]) -> AsyncIterator[str | bytes]:
    """Each item as an SSE event, up to an error item, the last. Items that arrive as SSE bytes
    (the replica's `sse_batches`) pass through untouched; typed items (the first one, the
    router's own errors) are encoded here."""
    async for item in items:
        yield item if isinstance(item, bytes) else sse_event(item)
        if isinstance(item, ErrorResponse):
            return


async def sse(
    items: AsyncGenerator[BaseModel | bytes, None], stamp: Callable[[], bytes] | None = None
) -> AsyncIterator[str | bytes]:
    """Relay a stream as server-sent events, ending with `data: [DONE]` (after an error event
    when the stream fails: a router bug mid-stream still ends the stream in OpenAI form).
    `stamp`: the relay timestamp comment that leads each relayed SSE item
    (`ModelStream.relay_comment`), when the caller asked for timestamps."""
    try:
        async for event in end_on_failure(_events(items), "the router"):
            if isinstance(event, ErrorResponse):
                yield sse_event(event)
            elif stamp is not None and isinstance(event, bytes):
                yield stamp() + event
            else:
                yield event
    finally:
        await items.aclose()  # client gone or stream done: the model request ends too
    yield DONE


def python_result(outcome: Routed | ErrorResponse, stream: bool) -> Any:
    """The Python API's answer: a response, an `ErrorResponse`, or an async generator."""
    result = outcome.result if isinstance(outcome, Routed) else outcome
    if isinstance(result, ModelStream):
        if isinstance(result.first, ErrorResponse):
            result.close()
            return error_stream(result.first)
        return result.items()
    if stream and isinstance(result, ErrorResponse):
        return error_stream(result)
    return result


ErrorRender = Callable[[ErrorResponse | OpenAIError, dict[str, str] | None], Response]
"""An error as one API's HTTP answer, with the given headers (OpenAI's
`router.http_errors.error_json`, or an edge's `router.apis.http.edge_error`)."""


def routed_answer(
    outcome: Routed | ErrorResponse,
    error: ErrorRender,
    events: Callable[[ModelStream], AsyncIterator[str | bytes]],
    answer: Callable[[Any, dict[str, str]], Response],
) -> Response:
    """The HTTP answer to a routed request in one API's shapes, with the decision headers.

    Args:
        outcome: what `Gateway.route` answered.
        error: renders an error (before the stream's first item, or instead of a response).
        events: the SSE events of a stream whose first item is not an error.
        answer: renders a whole (non-streamed) response with the headers.
    """
    if isinstance(outcome, ErrorResponse):
        return error(outcome, None)
    headers = outcome.headers()
    result = outcome.result
    if isinstance(result, ModelStream):
        if isinstance(result.first, ErrorResponse):
            result.close()
            return error(result.first, headers)
        return StreamingResponse(events(result), media_type="text/event-stream", headers=headers)
    if isinstance(result, ErrorResponse):
        return error(result, headers)
    return answer(result, headers)


def http_result(outcome: Routed | ErrorResponse) -> Response:
    """The HTTP answer: JSON, an SSE stream, or an OpenAI error, with the decision headers."""
    return routed_answer(
        outcome,
        error_json,
        lambda stream: sse(stream.items(), stream.relay_comment if stream.timing else None),
        lambda result, headers: JSONResponse(result.model_dump(mode="json"), headers=headers),
    )
