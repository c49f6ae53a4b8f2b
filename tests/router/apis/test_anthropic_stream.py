"""Streamed chat answers as Anthropic's message stream (`router.apis.anthropic.stream`): the event
sequence and framing, pings while the chat stream is silent, errors mid-stream, closing, and the
stream folded by the `anthropic` SDK's own accumulator equal to the non-streamed message, for
every tool-call family through the real `ChatHandler` (`family_runs`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from family_runs import FAMILY_SAMPLES, MODEL, run_family
from pydantic import BaseModel, TypeAdapter
from toolcall_samples import Sample, with_tools

from deployments.protocol.errors import OpenAIError
from deployments.protocol.responses import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    DeltaMessage,
    Usage,
)
from router.apis.anthropic import AnthropicEdge

EDGE = AnthropicEdge()
EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


def chunk(
    finish: str | None = None, usage: Usage | None = None, choices: bool = True, **delta: Any
) -> ChatCompletionChunk:
    items = [ChunkChoice(index=0, delta=DeltaMessage(**delta), finish_reason=finish)]
    return ChatCompletionChunk(
        id="chatcmpl-s1", created=0, model=MODEL, choices=items if choices else [], usage=usage
    )


def call(index: int, call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    """One `delta.tool_calls` entry: a call's header when it has an id, else a fragment."""
    if call_id is None:
        return {"index": index, "function": {"arguments": arguments}}
    function = {"name": name, "arguments": arguments}
    return {"index": index, "id": call_id, "type": "function", "function": function}


CHUNKS = [
    chunk(role="assistant", content=""),
    chunk(reasoning_content="Need "),
    chunk(reasoning_content="the weather."),
    chunk(content="Checking."),
    chunk(tool_calls=[call(0, "call_a", "get_weather", "")]),
    chunk(tool_calls=[call(0, None, None, '{"city": ')]),
    chunk(tool_calls=[call(0, None, None, '"Oslo"}')]),
    chunk(tool_calls=[call(1, "call_b", "get_time", "{}")]),
    chunk(finish="tool_calls"),
    chunk(usage=Usage.of(20, 9), choices=False),
]
WHOLE = ChatCompletion(
    id="chatcmpl-w1",
    created=0,
    model=MODEL,
    choices=[
        ChatChoice(
            index=0,
            message=AssistantMessage(
                content="Checking.",
                reasoning_content="Need the weather.",
                tool_calls=[
                    {"id": "c1", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
                    {"id": "c2", "function": {"name": "get_time", "arguments": "{}"}},
                ],
            ),
            finish_reason="tool_calls",
        )
    ],
    usage=Usage.of(20, 9),
)  # fmt: skip


async def source(items: list[BaseModel], pause_s: float = 0.0) -> AsyncIterator[BaseModel]:
    for i, item in enumerate(items):
        if i and pause_s:
            await asyncio.sleep(pause_s)
        yield item


def parse_sse(texts: list[str]) -> list[dict[str, Any]]:
    """The events of SSE texts, each checked to be `event: <type>\\ndata: <json>\\n\\n`."""
    events = []
    for text in texts:
        name, data = text.removesuffix("\n\n").split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        events.append(event)
    return events


def stream_events(
    request: dict[str, Any], items: list[BaseModel], edge: AnthropicEdge = EDGE, pause_s: float = 0
) -> list[dict[str, Any]]:
    async def go() -> list[str]:
        return [text async for text in edge.events(request, source(items, pause_s))]

    return parse_sse(asyncio.run(go()))


def fold(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The message the SDK's `messages.stream(...).get_final_message()` folds from the events
    (each checked against the SDK's event types)."""
    snapshot, buffers = None, {}
    for event in events:
        if event["type"] != "ping":
            EVENT.validate_python(event)
            snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=buffers)
    assert snapshot is not None
    return snapshot.to_dict()


def comparable(message: dict[str, Any]) -> dict[str, Any]:
    """A message without its ids, as the SDK's `Message` reads it."""
    out = Message.model_validate(message).model_dump(mode="json", exclude_none=True)
    out["content"] = [{k: v for k, v in b.items() if k != "id"} for b in out["content"]]
    return {k: v for k, v in out.items() if k != "id"}


def test_a_stream_sends_anthropics_event_sequence() -> None:
    events = stream_events({"model": MODEL}, CHUNKS)
    shape = [
        (e["type"], e.get("index"), (e.get("delta") or e.get("content_block") or {}).get("type"))
        for e in events
    ]
    assert shape == [
        ("message_start", None, None),
        ("ping", None, None),
        ("content_block_start", 0, "thinking"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "signature_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, "text"),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, "tool_use"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None),
        ("content_block_start", 3, "tool_use"),
        ("content_block_delta", 3, "input_json_delta"),
        ("content_block_stop", 3, None),
        ("message_delta", None, None),
        ("message_stop", None, None),
    ]
    start = events[0]["message"]
    assert start["id"] == "msg_s1" and start["content"] == [] and start["stop_reason"] is None
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"]["input_tokens"] == 20 and events[-2]["usage"]["output_tokens"] == 9


def test_the_folded_stream_is_the_non_streamed_message() -> None:
    folded = fold(stream_events({"model": MODEL}, CHUNKS))
    assert comparable(folded) == comparable(EDGE.answer({"model": MODEL}, WHOLE))


def test_a_matched_stop_sequence_ends_the_stream_with_it() -> None:
    stopped = chunk(finish="stop")
    stopped.choices[0].stop_reason = "Three"
    items = [chunk(role="assistant", content=""), chunk(content="One two. "), stopped]
    events = stream_events({"stop": ["Three"]}, items)
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "Three"}


def test_pings_go_out_while_the_chat_stream_is_silent() -> None:
    edge = AnthropicEdge(ping_interval_s=0.02)
    items = [chunk(role="assistant", content=""), chunk(content="late"), chunk(finish="stop")]
    events = stream_events({}, items, edge, pause_s=0.15)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"]
    first_text = kinds.index("content_block_start")
    assert kinds[2:first_text].count("ping") >= 3, "a ping per interval before the text arrives"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert fold(events)["content"] == [{"type": "text", "text": "late"}]


def test_an_error_item_ends_the_stream_with_an_anthropic_error_event() -> None:
    failure = OpenAIError("model m failed mid-stream", status_code=500).response()
    events = stream_events({}, [chunk(role="assistant", content=""), chunk(content="Hi"), failure])
    assert [e["type"] for e in events][-3:] == [
        "content_block_start",
        "content_block_delta",
        "error",
    ]
    assert events[-1] == {
        "type": "error",
        "error": {"type": "api_error", "message": "model m failed mid-stream"},
    }
    overloaded = OpenAIError("no model answered", status_code=503).response()
    assert stream_events({}, [overloaded]) == [
        {"type": "error", "error": {"type": "overloaded_error", "message": "no model answered"}}
    ]


def test_a_failure_mid_stream_ends_with_an_opaque_api_error_event() -> None:
    async def broken() -> AsyncIterator[BaseModel]:
        yield chunk(role="assistant", content="")
        yield chunk(content="Hi")
        raise ConnectionError("the replica went away")

    async def go() -> list[str]:
        return [text async for text in EDGE.events({}, broken())]

    events = parse_sse(asyncio.run(go()))
    assert [e["type"] for e in events][-2:] == ["content_block_delta", "error"]
    error = events[-1]["error"]
    assert (
        error["type"] == "api_error" and "internal error in the Anthropic edge" in error["message"]
    )
    assert "went away" not in error["message"]


def test_closing_the_events_leaves_a_pending_read_to_finish_then_closes_the_source() -> None:
    edge = AnthropicEdge(ping_interval_s=0.01)
    release, closed = asyncio.Event(), asyncio.Event()
    cancelled: list[bool] = []

    async def held() -> AsyncIterator[BaseModel]:
        try:
            yield chunk(role="assistant", content="")
            await release.wait()
            yield chunk(content="never sent")
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        finally:
            closed.set()

    async def go() -> None:
        events = edge.events({}, held())
        pings = 0
        async for text in events:
            pings += text.startswith("event: ping")
            if pings == 3:  # the read of the second chunk is pending
                break
        await events.aclose()
        await asyncio.sleep(0.02)
        assert not closed.is_set(), "the pending read was not cancelled"
        release.set()
        await asyncio.wait_for(closed.wait(), 1)

    asyncio.run(go())
    assert cancelled == []


# ---- every tool-call family, through the real chat handler -----------------------------------


def anthropic_body(sample: Sample, stream: bool) -> dict[str, Any]:
    """The Anthropic request that `family_runs.chat_body` asks in chat terms."""
    tools = [
        {"name": t["function"]["name"], "input_schema": t["function"].get("parameters", {})}
        for t in with_tools(sample)
    ]
    return {
        "model": MODEL,
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
        "tools": tools,
        "stream": stream,
    }


def in_answer_order(message: dict[str, Any]) -> dict[str, Any]:
    """A folded stream's blocks as a non-streamed answer orders them: its thinking, then its
    text, then its calls (the chat answer keeps no order between text and calls)."""
    blocks = message["content"]
    merged = []
    for kind, key in (("thinking", "thinking"), ("text", "text")):
        parts = [b for b in blocks if b["type"] == kind]
        if parts:
            merged.append({**parts[0], key: "".join(b[key] for b in parts)})
    merged += [b for b in blocks if b["type"] == "tool_use"]
    return {**message, "content": merged}


@pytest.mark.parametrize("sample", FAMILY_SAMPLES.values(), ids=list(FAMILY_SAMPLES))
def test_every_family_streams_the_message_it_answers(tokenizer: Any, sample: Sample) -> None:
    async def both() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        whole_body = await EDGE.chat_body(anthropic_body(sample, stream=False))
        whole = await run_family(tokenizer, sample, False, whole_body)
        assert isinstance(whole, ChatCompletion)
        stream_body = await EDGE.chat_body(anthropic_body(sample, stream=True))
        chunks = await run_family(tokenizer, sample, True, stream_body)
        assert isinstance(chunks, list)
        texts = [t async for t in EDGE.events(stream_body, source(list(chunks)))]
        return EDGE.answer(whole_body, whole), parse_sse(texts)

    answer, events = asyncio.run(both())
    folded = fold(events)
    calls = [(b["name"], b["input"]) for b in answer["content"] if b["type"] == "tool_use"]
    assert calls == sample.calls
    assert answer["stop_reason"] == "tool_use"
    assert comparable(in_answer_order(folded)) == comparable(answer)
    types = [b["type"] for b in folded["content"]]
    if "text" not in types[types.index("tool_use") :]:  # no text written after a call
        assert comparable(folded) == comparable(answer)
