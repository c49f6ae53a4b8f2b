"""A streamed chat answer as Responses server-sent events.

Framing and event types as the OpenAI API reference ("Responses: streaming events") and the
`openai` SDK (`types/responses/response_stream_event.py`) give them: each event is
`event: <type>\\ndata: <json>\\n\\n`, its JSON carrying `type` and `sequence_number` (0, 1,
...); no `[DONE]` follows. Order: `response.created`, `response.in_progress`, the item events
of `builder.OutputBuilder`, then `response.completed` (or `response.incomplete`) with the whole
Response, as the non-streamed answer would be. A chat stream that fails (an `ErrorResponse`
item) ends with `response.failed`, the Response `status: failed` with `error` and the output
so far: the event the SDK's stream helper (`openai.lib.streaming.responses`) and Codex CLI both
read as the end of a failed response.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from pydantic import BaseModel

from deployments.protocol.errors import ErrorResponse
from deployments.protocol.responses import ChatCompletionChunk, Usage
from router.apis.responses.builder import Event, OutputBuilder
from router.apis.responses.context import ResponseContext
from router.apis.responses.output import response_object


def sse(event: Event, sequence_number: int) -> str:
    """One event as SSE text, numbered."""
    data = {"type": event["type"], "sequence_number": sequence_number, **event}
    return f"event: {event['type']}\ndata: {json.dumps(data)}\n\n"


def _error(error: ErrorResponse) -> dict[str, Any]:
    """A Response `error`: its `code` is one of the SDK's `ResponseError` codes; the chat
    error's own type and param ride along."""
    status = error.status_code
    code = "rate_limit_exceeded" if status == 429 else "invalid_prompt" if status < 500 else None
    detail = error.error
    return {
        "code": code or "server_error",
        "message": detail.message,
        "type": detail.type,
        "param": detail.param,
    }


async def response_events(
    context: ResponseContext,
    items: AsyncIterator[BaseModel],
    on_done: Callable[[dict[str, Any]], None],
) -> AsyncIterator[str]:
    """The Responses events of a streamed chat answer.

    Args:
        context: the request's facts.
        items: `ChatCompletionChunk`s, the usage chunk last, possibly ending in an
            `ErrorResponse`.
        on_done: called with the final Response (completed or incomplete) before its event is
            sent, so that a follow-up sent on that event finds it stored.

    Yields:
        SSE text, through `response.completed`, `response.incomplete` or `response.failed`.
    """
    count = 0

    def frame(events: list[Event]) -> str:
        nonlocal count
        text = "".join(sse(e, count + i) for i, e in enumerate(events))
        count += len(events)
        return text

    def opening(model: str) -> str:
        shell = response_object(context, model, "in_progress", [])
        return frame(
            [
                {"type": "response.created", "response": shell},
                {"type": "response.in_progress", "response": shell},
            ]
        )

    builder = OutputBuilder(context.namespaces)
    model = context.echo["model"]
    usage: Usage | None = None
    finish: str | None = None
    started = False
    async for item in items:
        if not started:  # the model that answers is known from the first chunk
            model = item.model if isinstance(item, ChatCompletionChunk) else model
            yield opening(model)
            started = True
        if isinstance(item, ErrorResponse):
            failed = response_object(context, model, "failed", builder.partial(), usage)
            failed["error"] = _error(item)
            yield frame([{"type": "response.failed", "response": failed}])
            return
        assert isinstance(item, ChatCompletionChunk), f"not a chat stream item: {item!r}"
        usage = item.usage or usage
        events: list[Event] = []
        for choice in item.choices:
            delta = choice.delta
            events += builder.reasoning(delta.reasoning_content or "")
            events += builder.content(delta.content or "")
            events += builder.tool_calls(delta.tool_calls or [])
            finish = choice.finish_reason or finish
        if events:
            yield frame(events)
    if not started:
        yield opening(model)
    incomplete = finish == "length"
    closing = builder.finish(incomplete)
    status = "incomplete" if incomplete else "completed"
    final = response_object(context, model, status, builder.items, usage)
    on_done(final)
    yield frame([*closing, {"type": f"response.{status}", "response": final}])
