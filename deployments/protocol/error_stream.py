"""Streams that end in an OpenAI error: the one wrapper that turns a failure mid-stream into a
final `ErrorResponse` item, and the stream of one error.

Once a stream has sent an item, its HTTP status is fixed, so a later failure can only be the
stream's last item (an SSE relay writes it as the last event before `data: [DONE]`). Each layer
wraps the streams it produces, so each catches its own failures: the model replica its handlers'
streams (`deployments.server`), the router a model's stream (`router.model_stream`: a stall or a
broken call) and its own relay of it to HTTP (`router.ingress`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from deployments.protocol.errors import ErrorResponse, OpenAIError, internal_error
from deployments.protocol.request_id import current_request_id

logger = logging.getLogger(__name__)

T = TypeVar("T")

Failure = Callable[[Exception], ErrorResponse]
"""The final item for an exception that is not an `OpenAIError`."""


async def end_on_failure(
    stream: AsyncIterator[T], where: str, failure: Failure | None = None
) -> AsyncIterator[T | ErrorResponse]:
    """Relay `stream`; when it raises, end with one `ErrorResponse` item instead.

    An `OpenAIError` becomes its own response. Any other exception is logged with its traceback
    under the request id and becomes `failure(exc)`, by default the opaque 500 `internal_error`
    (the client gets the request id, never the exception).

    Args:
        stream: The items.
        where: Whose stream it is, for the log and the default error (`the router`,
            `model smollm2-long`).
        failure: The final item for an exception other than `OpenAIError` (None: the opaque
            500 naming `where`).

    Yields:
        The stream's items, then at most one `ErrorResponse`.
    """
    try:
        async for item in stream:
            yield item
    except OpenAIError as exc:
        yield exc.response()
    except Exception as exc:  # reported to this client as the stream's last item
        rid = current_request_id()
        logger.exception("request %s: the stream failed mid-stream in %s", rid, where)
        yield internal_error(rid, where).response() if failure is None else failure(exc)


async def error_stream(error: ErrorResponse) -> AsyncIterator[ErrorResponse]:
    """A stream whose only item is `error` (an answer to a streamed request that failed before
    its first item)."""
    yield error
