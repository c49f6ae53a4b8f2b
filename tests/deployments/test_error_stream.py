"""The one mid-stream error wrapper (`deployments.protocol.error_stream`): items pass, a failure
becomes exactly one final `ErrorResponse`, and the stream of one error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from deployments.protocol.error_stream import end_on_failure, error_stream
from deployments.protocol.errors import INTERNAL_ERROR, ErrorResponse, OpenAIError


async def _items(n: int, then: Exception | None = None) -> AsyncIterator[int]:
    for i in range(n):
        yield i
    if then is not None:
        raise then


def _collect(stream: AsyncIterator[object]) -> list[object]:
    async def run() -> list[object]:
        return [item async for item in stream]

    return asyncio.run(run())


def test_a_stream_that_ends_well_is_relayed_as_it_is() -> None:
    assert _collect(end_on_failure(_items(3), "model m")) == [0, 1, 2]


def test_an_openai_error_mid_stream_is_its_own_final_item() -> None:
    error = OpenAIError("too long", param="messages", code="context_length_exceeded")
    *items, last = _collect(end_on_failure(_items(2, error), "model m"))
    assert items == [0, 1]
    assert isinstance(last, ErrorResponse) and last.body() == error.response().body()


def test_any_other_failure_is_an_opaque_500_naming_where() -> None:
    *items, last = _collect(end_on_failure(_items(1, RuntimeError("secret detail")), "model m"))
    assert items == [0] and isinstance(last, ErrorResponse)
    assert (last.status_code, last.error.code) == (500, INTERNAL_ERROR)
    assert "model m" in last.error.message and "secret" not in last.error.message


def test_the_caller_may_say_what_a_failure_becomes() -> None:
    def failure(exc: Exception) -> ErrorResponse:
        return OpenAIError(f"stalled: {type(exc).__name__}", status_code=500).response()

    stream = end_on_failure(_items(1, TimeoutError()), "the stream from m", failure)
    *items, last = _collect(stream)
    assert items == [0] and isinstance(last, ErrorResponse)
    assert last.error.message == "stalled: TimeoutError"


def test_an_error_stream_has_one_item() -> None:
    error = OpenAIError("no", status_code=503).response()
    assert _collect(error_stream(error)) == [error]
