"""A streamed chat answer as Anthropic's message stream (server-sent events).

Event sequence and framing as Anthropic sends them ("Streaming Messages"; the `anthropic` SDK's
`RawMessageStreamEvent` types): `message_start` (the message with empty content), `ping`, the
content blocks (`router.apis.anthropic.blocks`), `message_delta` (`stop_reason`,
`stop_sequence`, the usage), `message_stop`; each `event: <type>\\ndata: <json>\\n\\n`. A `ping`
also goes out each `ping_interval_s` the chat stream stays silent. An `ErrorResponse` item (a
failure mid-stream), or a failure while translating, becomes an `error` event, the last.

The chat stream's usage comes in its last chunk, so `message_start` counts 0 input tokens unless
its first chunk already carries usage, and `message_delta` has every count (the SDK's
accumulator takes the input counts from it too).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from pydantic import BaseModel

from deployments.protocol.error_stream import end_on_failure
from deployments.protocol.errors import ErrorResponse
from deployments.protocol.responses import ChatCompletionChunk, Usage
from deployments.protocol.tools import JsonObject
from router.apis.anthropic.blocks import BlockEvents
from router.apis.anthropic.errors import error_body
from router.apis.anthropic.heartbeat import aclose, with_beats
from router.apis.anthropic.message import message_id, stop_reason, usage

PING = {"type": "ping"}


def sse(event: JsonObject) -> str:
    """One event as SSE text, named by its `type`."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


class _Message:
    """The events of one streamed message, chunk by chunk."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.blocks = BlockEvents()
        self.finish_reason: str | None = None
        self.matched: str | None = None
        self.usage: Usage | None = None

    def start(self, first: ChatCompletionChunk) -> list[JsonObject]:
        message: JsonObject = {
            "id": message_id(first.id),
            "type": "message",
            "role": "assistant",
            "model": first.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(first.usage),
        }
        return [{"type": "message_start", "message": message}, PING]

    def push(self, chunk: ChatCompletionChunk) -> list[JsonObject]:
        out: list[JsonObject] = []
        self.usage = chunk.usage or self.usage
        for choice in chunk.choices:
            assert choice.index == 0, "the edge never asks for several choices"
            delta = choice.delta
            if delta.reasoning_content:
                out += self.blocks.thinking(delta.reasoning_content)
            if delta.content:
                out += self.blocks.text(delta.content)
            for entry in delta.tool_calls or ():
                out += self.blocks.tool_call(entry)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
                self.matched = choice.stop_reason
        return out

    def end(self) -> list[JsonObject]:
        reason, sequence = stop_reason(self.finish_reason, self.matched, self.stops)
        done = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage(self.usage),
        }
        return [*self.blocks.close(), done, {"type": "message_stop"}]


async def events(
    request: JsonObject, items: AsyncIterator[BaseModel], ping_interval_s: float
) -> AsyncIterator[str]:
    """Anthropic's SSE for a streamed chat answer.

    Args:
        request: the chat body the edge sent (its `stop` names the stop sequences).
        items: `ChatCompletionChunk`s, the usage chunk last, possibly ending in an
            `ErrorResponse`; closed when this stream ends or is closed (see
            `router.apis.anthropic.heartbeat`).
        ping_interval_s: seconds without a chunk between `ping` events.

    Yields:
        SSE text through `message_stop`, or through an `error` event (for an error item, or a
        failure of `items` or of the translation: the opaque 500 of `end_on_failure`).
    """
    beats = with_beats(items, ping_interval_s)
    translated = _translate(request.get("stop") or [], beats)
    guarded = end_on_failure(translated, "the Anthropic edge")
    try:
        async for event in guarded:
            yield sse(error_body(event) if isinstance(event, ErrorResponse) else event)
    finally:
        # each layer closed explicitly (an abandoned `async for` closes nothing): the last one
        # closes `items`
        for layer in (guarded, translated, beats):
            await aclose(layer)


async def _translate(
    stops: list[str], beats: AsyncIterator[BaseModel | None]
) -> AsyncIterator[JsonObject | ErrorResponse]:
    """The events of the chat stream's items (None: a beat), up to an error item, the last."""
    message = _Message(stops)
    started = False
    async for item in beats:
        if isinstance(item, ErrorResponse):
            yield item
            return
        if item is None:
            if started:  # a stream opens with `message_start`: no beat comes before it
                yield PING
            continue
        assert isinstance(item, ChatCompletionChunk), f"not a chunk: {type(item).__name__}"
        if not started:
            started = True
            for event in message.start(item):
                yield event
        for event in message.push(item):
            yield event
    if started:
        for event in message.end():
            yield event
