"""A model stream that stalls or breaks after its first item (`router.model_stream`), and a
router failure while relaying it as SSE (`router.openai_answers.sse`): each ends with one error item
or event, then `data: [DONE]`, and the model's request is cancelled."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

from pydantic import BaseModel
from ray.serve.handle import DeploymentResponseGenerator

from deployments.protocol.errors import ENGINE_ERROR, INTERNAL_ERROR, ErrorResponse
from deployments.protocol.sse import DONE
from router.model_stream import ModelStream
from router.openai_answers import sse


class Chunk(BaseModel):
    n: int


class _Response:
    """A handle's stream: scripted items, then a stall, a failure or the end."""

    def __init__(self, items: list[Any], then: str = "end") -> None:
        self._items = list(items)
        self._then = then
        self.cancelled = False

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if self._items:
            return self._items.pop(0)
        if self._then == "stall":
            await asyncio.Event().wait()
        if self._then == "break":
            raise ConnectionError("the replica went away")
        raise StopAsyncIteration

    def cancel(self) -> None:
        self.cancelled = True


def _drain(then: str) -> tuple[list[Any], _Response, list[bool]]:
    response = _Response([Chunk(n=1), b"data: {}\n\n"], then)
    released: list[bool] = []
    handle_stream = cast(DeploymentResponseGenerator, response)
    stream = ModelStream("m", Chunk(n=0), handle_stream, lambda: released.append(True), 0.05)

    async def run() -> list[Any]:
        return [item async for item in stream.items()]

    return asyncio.run(run()), response, released


def test_a_finished_stream_relays_every_item_and_ends_once() -> None:
    items, response, released = _drain("end")
    assert items == [Chunk(n=0), Chunk(n=1), b"data: {}\n\n"]
    assert released == [True] and response.cancelled  # cancelling a finished call is a no-op


def test_a_stall_ends_with_an_error_item_and_cancels_the_model_request() -> None:
    items, response, released = _drain("stall")
    assert items[:3] == [Chunk(n=0), Chunk(n=1), b"data: {}\n\n"]
    (last,) = items[3:]
    assert isinstance(last, ErrorResponse) and last.error.code == ENGINE_ERROR
    assert last.error.message == "model m failed mid-stream: no output for 0.05 s"
    assert response.cancelled and released == [True]


def test_a_broken_stream_ends_with_an_error_item_naming_the_request() -> None:
    items, response, released = _drain("break")
    last = items[-1]
    assert isinstance(last, ErrorResponse) and last.status_code == 500
    assert last.error.message.startswith("model m failed mid-stream: the stream broke (request ")
    assert response.cancelled and released == [True]


def test_a_router_failure_while_relaying_ends_the_sse_stream_in_openai_form() -> None:
    closed: list[bool] = []

    async def items() -> AsyncIterator[BaseModel | bytes]:
        try:
            yield Chunk(n=0)
            yield b"data: {}\n\n"
            raise RuntimeError("a router bug")
        finally:
            closed.append(True)

    async def run() -> list[str | bytes]:
        return [event async for event in sse(items())]

    events = asyncio.run(run())
    assert events[:2] == ['data: {"n":0}\n\n', b"data: {}\n\n"] and events[-1] == DONE
    error = json.loads(str(events[2]).removeprefix("data: "))["error"]
    assert error["code"] == INTERNAL_ERROR and "the router" in error["message"]
    assert len(events) == 4 and closed == [True]


def test_an_error_item_is_the_last_sse_event() -> None:
    async def items() -> AsyncIterator[BaseModel | bytes]:
        yield Chunk(n=0)
        yield ErrorResponse.model_validate({"error": {"message": "m", "type": "t"}})
        yield Chunk(n=1)  # never sent

    async def run() -> list[str | bytes]:
        return [event async for event in sse(items())]

    events = asyncio.run(run())
    assert events == [
        'data: {"n":0}\n\n',
        'data: {"error": {"message": "m", "type": "t", "param": null, "code": null}}\n\n',
        DONE,
    ]
