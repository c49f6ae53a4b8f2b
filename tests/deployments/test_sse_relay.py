"""The replica's SSE relay (`deployments.streaming.sse_relay.sse_batches`): the first item typed and at
once, ready chunks together, the batching interval, errors, and clean-up on close."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from pydantic import BaseModel

from deployments.protocol.errors import ErrorDetail, ErrorResponse
from deployments.protocol.responses import ChatCompletionChunk
from deployments.streaming.sse_relay import sse_batches
from deployments.streaming.token_timing import REPLICA_COMMENT, TokenTiming


class Chunk(BaseModel):
    n: int


def _events(data: bytes) -> list[dict]:
    parts = data.decode().split("\n\n")
    assert parts[-1] == "" and all(p.startswith("data: ") for p in parts[:-1])
    return [json.loads(p[len("data: ") :]) for p in parts[:-1]]


async def _source(
    gaps_s: list[float], closed: list[bool], error_at: int | None = None
) -> AsyncIterator[BaseModel]:
    try:
        for n, gap in enumerate(gaps_s):
            if gap:  # 0: produced in the same turn of the event loop as the previous chunk
                await asyncio.sleep(gap)
            if n == error_at:
                yield ErrorResponse(error=ErrorDetail(message="boom", type="server_error"))
                return
            yield Chunk(n=n)
    finally:
        closed.append(True)


async def _collect(stream: AsyncIterator[BaseModel | bytes]) -> list[tuple[float, object]]:
    start = time.monotonic()
    return [(time.monotonic() - start, item) async for item in stream]


def test_first_item_is_typed_and_ready_chunks_travel_together() -> None:
    closed: list[bool] = []
    # chunk 0 at once, 1-3 back to back after 50 ms, 4 after another 50 ms
    out = asyncio.run(_collect(sse_batches(_source([0, 0.05, 0, 0, 0.05], closed), 0.0)))
    assert out[0][1] == Chunk(n=0)
    batches = [_events(item) for _, item in out[1:]]
    assert [e["n"] for b in batches for e in b] == [1, 2, 3, 4]
    assert len(batches) < 4  # 1, 2 and 3 were ready together
    assert closed == [True]


def test_interval_groups_chunks_but_never_delays_the_first() -> None:
    closed: list[bool] = []
    out = asyncio.run(_collect(sse_batches(_source([0.001] + [0.01] * 10, closed), 0.05)))
    assert out[0][0] < 0.03 and out[0][1] == Chunk(n=0)  # first chunk: no interval wait
    batches = [_events(item) for _, item in out[1:]]
    assert [e["n"] for b in batches for e in b] == list(range(1, 11))
    assert len(batches) <= 4  # ~100 ms of chunks in 50 ms batches


def test_an_error_is_the_streams_last_event() -> None:
    closed: list[bool] = []
    out = asyncio.run(_collect(sse_batches(_source([0, 0, 0, 0], closed, error_at=2), 0.0)))
    events = [e for _, item in out[1:] for e in _events(item)]
    assert events[-1]["error"]["message"] == "boom" and [e.get("n") for e in events[:-1]] == [1]


def test_a_first_error_is_passed_typed() -> None:
    closed: list[bool] = []
    out = asyncio.run(_collect(sse_batches(_source([0, 0], closed, error_at=0), 0.0)))
    assert len(out) == 1 and isinstance(out[0][1], ErrorResponse)


def test_closing_the_relay_closes_the_source() -> None:
    closed: list[bool] = []

    async def first_then_close() -> None:
        relay = sse_batches(_source([0] + [0.5] * 5, closed), 0.0)
        assert await anext(relay) == Chunk(n=0)
        await relay.aclose()  # the client went away

    asyncio.run(first_then_close())
    assert closed == [True]


def test_timing_leads_each_stamped_event_with_its_comment() -> None:
    """With `timing`, every stamped chunk's event starts with the replica's comment line, whose
    stamps run in order up to the encoding; chunks without stamps and `timing=False` add none."""
    stamp = TokenTiming(1.0, 2.0, 3.0)

    async def source() -> AsyncIterator[BaseModel]:
        for n in range(4):
            chunk = ChatCompletionChunk(id="c", created=0, model="m", choices=[])
            yield chunk.with_timing(stamp if n != 2 else None)

    async def collect(timing: bool) -> list[str]:
        items = [i async for i in sse_batches(source(), 0.0, timing)]
        return [e for b in items[1:] for e in b.decode().split("\n\n") if e]

    for event in (events := asyncio.run(collect(True))):
        assert event.count("data: ") == 1
    stamped = [e for e in events if e.startswith(REPLICA_COMMENT)]
    assert len(events) == 3 and len(stamped) == 2  # the chunk without stamps has none
    for event in stamped:
        comment, data = event.split("\n")
        stamps = json.loads(comment[len(REPLICA_COMMENT) :])
        assert data.startswith("data: ")
        assert stamps["step_started"] == 1.0 and stamps["received"] == 3.0
        assert 3.0 < stamps["built"] <= stamps["encoded"] <= time.monotonic()
    assert all(e.startswith("data: ") for e in asyncio.run(collect(False)))
